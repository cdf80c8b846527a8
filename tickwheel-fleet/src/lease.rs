//! The lease keep-alive loop and the self-fence clock.
