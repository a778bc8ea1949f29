//! Random well-formed and malformed packets against a responder and a requester.
