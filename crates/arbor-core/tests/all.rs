//! Integration tests of arbor-core, driven by the scripted provider.

mod suite;
