//! Background sampling thread.
