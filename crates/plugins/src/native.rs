//! The built-in `Native` plugin type (to be written).
