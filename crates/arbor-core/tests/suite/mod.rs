mod cancel;
mod events;
mod limits;
mod permission;
mod supervisor;
mod support;
mod tools;
mod usage;
