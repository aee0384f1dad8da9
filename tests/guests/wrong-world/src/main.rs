//! Test fixture: a plain `wasm32-wasip2` program. It compiles to a
//! `wasi:cli/run` command component, which exports no
//! `iar:plugin/item-action`; the host must refuse to load it as a plugin and
//! say which world it expected.

fn main() {
    println!("I am a command, not a plugin");
}
