mod cancel;
mod events;
mod limits;
mod permission;
mod support;
mod tools;
mod usage;
