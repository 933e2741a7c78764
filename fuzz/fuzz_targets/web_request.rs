//! The web pages' parsers of request bytes (`xet_server::web`): the page a path names,
//! query strings and forms, `Accept`, and the sign-in cookie.
//!
//! Input: up to four parts split at `\0`: a path, a query or form body, an `Accept`
//! value, a `Cookie` header.
//! Checks: no panic; pairs written back percent-encoded parse to the same pairs; the
//! cookie signing in any token (the form's first value) gives that token back, in any
//! position among other cookies, and after the fuzzed ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_hub::api::quote_revision;
use xet_server::web::fuzzing as web;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0);
    let (path, form, accept, cookie) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let _ = web::names_a_page(&text(path));
    let _ = web::wants_html(&text(accept));
    let _ = web::cookie_token(&[cookie]);

    let pairs = web::form_pairs(&text(form));
    let written: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", quote_revision(k), quote_revision(v)))
        .collect();
    let again = web::form_pairs(&written.join("&"));
    // A pair of two empty strings writes as `=`, which parses back as one.
    assert_eq!(again, pairs, "{written:?}");

    let token = pairs.first().map(|(_, v)| v.as_str()).unwrap_or("hf_x");
    let mine = web::sign_in_pair(token);
    for header in [
        mine.clone(),
        format!("a=1; {mine}"),
        format!("{mine}; b=2"),
        format!(" {mine} ;"),
    ] {
        assert_eq!(
            web::cookie_token(&[header.as_bytes()]).as_deref(),
            Some(token),
            "{header:?}"
        );
    }
    // The first cookie of that name counts: after the fuzzed header, it is found unless
    // the fuzzed one names the cookie too.
    let found = web::cookie_token(&[cookie, mine.as_bytes()]);
    if web::cookie_token(&[cookie]).is_none() && !text(cookie).contains("xet_session") {
        assert_eq!(found.as_deref(), Some(token));
    }
});
