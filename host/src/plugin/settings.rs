//! The settings document an operator writes for one plugin (see
//! [`crate::settings_file`]): `NAME.yaml` beside `NAME.wasm`, the
//! `settings:` of an `iar test` file, or the settings of a plugin ConfigMap.

pub use crate::settings_file::SettingsFile as SettingsDoc;
