//! `componentize <core.wasm> <component.wasm>`: encodes the module (with
//! the component type wit-bindgen embedded in it) as a component, and
//! prints the module's imports: with no WASI there is nothing to adapt.

fn main() {
    let mut args = std::env::args().skip(1);
    let (input, output) = match (args.next(), args.next()) {
        (Some(i), Some(o)) => (i, o),
        _ => panic!("componentize <core.wasm> <component.wasm>"),
    };
    let module = std::fs::read(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.validate(true).encode())
        .unwrap_or_else(|e| panic!("{input}: {e:#}"));
    std::fs::write(&output, component).unwrap_or_else(|e| panic!("{output}: {e}"));
    for payload in wasmparser::Parser::new(0).parse_all(&module) {
        if let Ok(wasmparser::Payload::ImportSection(imports)) = payload {
            for import in imports.into_imports() {
                let import = import.expect("a valid import");
                println!("import {} {}", import.module, import.name);
            }
        }
    }
}
