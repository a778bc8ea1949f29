//! Responder fed packets by hand: validation of every field, duplicates, NAK rules.
