//! Xorb bodies as [`crate::Cas::put_xorb`] takes them ([`XorbBody`]): in one buffer, in
//! pieces, or received and verified on the way in ([`XorbReceiver`], [`ReceivedXorb`]).

use bytes::Bytes;
use xet_hash::MerkleHash;
use xet_xorb::XorbInfo;

use crate::XorbPieces;

/// A xorb body in whichever form its caller has it, so that each implementation of
/// [`crate::Cas::put_xorb`] takes the form it works with best without a copy: the HTTP
/// client sends pieces as they are, a store stores a received body without verifying it
/// again, and any other form is converted with the helpers below.
#[derive(Clone, Debug)]
pub enum XorbBody {
    /// The serialized chunk region in one buffer, with or without the v1 footer.
    Bytes(Bytes),
    /// The upload body (no footer) in pieces, with their CRC-64/NVME if the caller took it.
    Pieces(XorbPieces),
    /// A body received through a [`XorbReceiver`] (verified on the way in if it could be).
    Received(ReceivedXorb),
}

impl XorbBody {
    /// Length of the whole body.
    pub fn len(&self) -> u64 {
        match self {
            XorbBody::Bytes(b) => b.len() as u64,
            XorbBody::Pieces(p) => p.len(),
            XorbBody::Received(r) => r.body().len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole body in one buffer (a copy only for several pieces).
    pub fn into_bytes(self) -> Bytes {
        match self {
            XorbBody::Bytes(b) => b,
            XorbBody::Pieces(p) => p.concat(),
            XorbBody::Received(r) => r.into_body(),
        }
    }

    /// The body as pieces (one piece unless it came in several).
    pub fn into_pieces(self) -> XorbPieces {
        match self {
            XorbBody::Pieces(p) => p,
            other => XorbPieces::from(other.into_bytes()),
        }
    }

    /// The body as received: a [`XorbBody::Received`] one as it is, any other unverified,
    /// for the store to verify in full.
    pub fn into_received(self) -> ReceivedXorb {
        match self {
            XorbBody::Received(r) => r,
            other => ReceivedXorb::unverified(other.into_bytes()),
        }
    }
}

impl From<Bytes> for XorbBody {
    fn from(body: Bytes) -> Self {
        XorbBody::Bytes(body)
    }
}

impl From<Vec<u8>> for XorbBody {
    fn from(body: Vec<u8>) -> Self {
        XorbBody::Bytes(Bytes::from(body))
    }
}

impl From<XorbPieces> for XorbBody {
    fn from(body: XorbPieces) -> Self {
        XorbBody::Pieces(body)
    }
}

impl From<ReceivedXorb> for XorbBody {
    fn from(body: ReceivedXorb) -> Self {
        XorbBody::Received(body)
    }
}

/// Verifies a xorb upload while it is being received: after each piece of the body
/// arrives, [`advance`](Self::advance) decompresses and hashes the chunks that are now
/// whole, while they are still in the CPU's cache, instead of in a second pass over the
/// whole body once it is stored. The outcome rides along with the body
/// ([`ReceivedXorb`]) to [`crate::Cas::put_xorb`] as [`XorbBody::Received`].
///
/// Only a footer-less body (what clients upload) is verified this way. At the first
/// problem, or for a footered body, the receiver stops, and the store verifies the body
/// in full as it does any other body, which also reports what is wrong.
#[derive(Debug)]
pub struct XorbReceiver {
    verifier: Option<xet_xorb::BodyVerifier>,
}

impl XorbReceiver {
    /// For a body declared as `len` bytes long.
    pub fn new(len: u64) -> XorbReceiver {
        XorbReceiver {
            verifier: xet_xorb::BodyVerifier::new(len, &xet_xorb::Limits::PROTOCOL).ok(),
        }
    }

    /// `received` is the body so far: everything given before, and more.
    pub fn advance(&mut self, received: &[u8]) {
        if let Some(v) = &mut self.verifier
            && v.advance(received).is_err()
        {
            self.verifier = None;
        }
    }

    /// The whole body, verified as the xorb `hash` if it was one. Does no more than
    /// compute the xorb hash: a body not already walked to its end by
    /// [`advance`](Self::advance) is left for the store to verify.
    pub fn finish(self, body: Bytes, hash: &MerkleHash) -> ReceivedXorb {
        let verified = self
            .verifier
            .filter(|v| v.verified_len() == body.len() as u64)
            .and_then(|v| v.finish(&body, Some(hash)).ok());
        ReceivedXorb { body, verified }
    }
}

/// A received xorb upload and, if [`XorbReceiver`] verified it on the way in, what it
/// found. Only a receiver makes a verified one, so the two cannot be mismatched.
#[derive(Debug, Clone)]
pub struct ReceivedXorb {
    body: Bytes,
    verified: Option<XorbInfo>,
}

impl ReceivedXorb {
    /// A body received without a [`XorbReceiver`], for the store to verify in full.
    pub fn unverified(body: Bytes) -> ReceivedXorb {
        ReceivedXorb {
            body,
            verified: None,
        }
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Whether the body was verified as it arrived.
    pub fn is_verified(&self) -> bool {
        self.verified.is_some()
    }

    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The body and what the receiver found, if it verified the body as the xorb `hash`
    /// (a store then stores it without a second pass); else the body back, to be verified
    /// in full.
    pub fn into_verified(self, hash: &MerkleHash) -> Result<(Bytes, XorbInfo), Bytes> {
        match self.verified {
            Some(info) if info.hash == *hash && info.body_len() == self.body.len() as u64 => {
                Ok((self.body, info))
            }
            _ => Err(self.body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorb_body_converts_between_forms_without_losing_bytes() {
        let data = Bytes::from_static(b"0123456789");
        let mut pieces = XorbPieces::new();
        pieces.push(data.slice(..4));
        pieces.push(data.slice(4..));
        let forms = [
            XorbBody::from(data.clone()),
            XorbBody::from(pieces.clone()),
            XorbBody::from(ReceivedXorb::unverified(data.clone())),
        ];
        for body in forms {
            assert_eq!(body.len(), 10);
            assert!(!body.is_empty());
            assert_eq!(body.clone().into_bytes(), data);
            assert_eq!(body.clone().into_pieces().concat(), data);
            let received = body.into_received();
            assert!(!received.is_verified());
            assert_eq!(received.body(), &data);
        }
        // Pieces stay pieces: the HTTP client sends them without joining.
        assert_eq!(XorbBody::from(pieces).into_pieces().pieces().len(), 2);
        assert!(XorbBody::from(Vec::new()).is_empty());
    }

    #[test]
    fn a_received_body_is_taken_as_verified_only_under_its_own_hash() {
        let chunk = b"a chunk of a xorb received in pieces".repeat(50);
        let s = xet_xorb::serialize_chunk(&chunk, None, xet_xorb::CompressionScheme::None).unwrap();
        let hash = xet_hash::xorb_hash(&[(s.hash(), chunk.len() as u64)]);
        let body = Bytes::copy_from_slice(s.bytes());
        let mut r = XorbReceiver::new(body.len() as u64);
        r.advance(&body[..body.len() / 2]);
        r.advance(&body);
        let received = r.finish(body.clone(), &hash);
        assert!(received.is_verified());
        let other = xet_hash::chunk_hash(b"another xorb");
        assert_eq!(received.clone().into_verified(&other).unwrap_err(), body);
        let (got, info) = received.into_verified(&hash).unwrap();
        assert_eq!((got, info.hash), (body, hash));
    }
}
