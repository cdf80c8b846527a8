//! Moves a [`tickwheel`] scheduled queue between hosts through Redis.
#![forbid(unsafe_code)]
