use super::*;

const BYTES: &[u8] = b"\0asm component bytes";

fn digest() -> String {
    hex::encode(Sha256::digest(BYTES))
}

fn cm(name: &str, data: &[(&str, &str)], inline: bool) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(LABEL.into(), "true".into())])),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        binary_data: inline.then(|| BTreeMap::from([(KEY_WASM.into(), ByteString(BYTES.into()))])),
        ..ConfigMap::default()
    }
}

#[test]
fn an_inline_plugin_parses_with_defaults() {
    let spec = parse(&cm("labels", &[("sha256", &digest())], true)).unwrap();
    assert_eq!(spec.name, "labels");
    assert_eq!(spec.configmap, "labels");
    assert!(spec.enabled);
    assert_eq!(spec.order, 0);
    assert_eq!(spec.source, Source::Inline(BYTES.to_vec()));
    assert!(spec.settings.config.is_empty());
    verify(&spec, BYTES).unwrap();
}

#[test]
fn every_field_is_read() {
    let upper = format!("sha256:{}", digest().to_uppercase());
    let spec = parse(&cm(
            "cm",
            &[
                ("sha256", &upper),
                ("name", "team-labels"),
                ("enabled", "false"),
                ("order", " -3 "),
                ("reference", "/plugins/labels.wasm"),
                (
                    "settings.yaml",
                    "config: {labels: a=b}\nlimits: {deadline: 2s, isolation: item}\nallowRead: [pods]\n",
                ),
            ],
            false,
        ))
        .unwrap();
    assert_eq!(spec.name, "team-labels");
    assert!(!spec.enabled);
    assert_eq!(spec.order, -3);
    assert_eq!(spec.sha256, digest(), "prefix dropped, lowercased");
    assert_eq!(spec.source, Source::Path("/plugins/labels.wasm".into()));
    assert_eq!(spec.settings.config["labels"], "a=b");
    assert_eq!(
        spec.settings.limits.deadline,
        std::time::Duration::from_secs(2)
    );
    assert_eq!(spec.settings.limits.isolation, iar_plugin::Isolation::Item);
    let url = parse(&cm(
        "cm",
        &[
            ("sha256", &digest()),
            ("reference", "https://example.com/p.wasm"),
        ],
        false,
    ))
    .unwrap();
    assert_eq!(url.source, Source::Url("https://example.com/p.wasm".into()));
}

#[test]
fn each_rule_names_the_configmap() {
    let d = digest();
    let cases: Vec<(ConfigMap, &str)> = vec![
        (cm("a", &[], true), "digest-required"),
        (cm("a", &[("sha256", "  ")], true), "digest-required"),
        (cm("a", &[("sha256", "abc")], true), "digest-required"),
        (cm("a", &[("sha256", &d)], false), "plugin-source"),
        (
            cm("a", &[("sha256", &d), ("reference", "/p.wasm")], true),
            "plugin-source",
        ),
        (
            cm(
                "a",
                &[("sha256", &d), ("reference", "plugins/p.wasm")],
                false,
            ),
            "plugin-source",
        ),
        (
            cm(
                "a",
                &[("sha256", &d), ("reference", "http://example.com/p")],
                false,
            ),
            "plugin-source",
        ),
        (
            cm("a", &[("sha256", &d), ("enabled", "yes")], true),
            "plugin-settings",
        ),
        (
            cm("a", &[("sha256", &d), ("order", "1.5")], true),
            "plugin-settings",
        ),
        (
            cm(
                "a",
                &[("sha256", &d), ("settings.yaml", "limts: {deadline: 2s}")],
                true,
            ),
            "plugin-settings",
        ),
        (
            cm(
                "a",
                &[("sha256", &d), ("settings.yaml", "allowRead: ['[']")],
                true,
            ),
            "plugin-settings",
        ),
        (
            cm("a", &[("sha256", &d), ("name", "Bad Name")], true),
            "plugin-name",
        ),
    ];
    for (configmap, rule) in cases {
        let err = parse(&configmap).unwrap_err();
        assert_eq!(err.rule(), rule, "{err}");
        let message = err.to_string();
        assert!(message.starts_with("ConfigMap \"a\": "), "{message}");
        assert!(message.ends_with(&format!("(rule: {rule})")), "{message}");
    }
}

#[test]
fn a_wrong_digest_is_caught_before_anything_reads_the_bytes() {
    let other = hex::encode(Sha256::digest(b"other"));
    let spec = parse(&cm("a", &[("sha256", &other)], true)).unwrap();
    let err = verify(&spec, BYTES).unwrap_err();
    assert_eq!(err.rule(), "digest-match");
    assert!(
        err.to_string().contains(&other),
        "names the expected: {err}"
    );
    assert!(
        !err.to_string().contains(&digest()),
        "never the digest of what was read: {err}"
    );
}

fn velero(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let mut cm = cm(name, data, false);
    cm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm
}

#[test]
fn velero_plugin_config_follows_velero_labels() {
    let maps = [
        velero(
            "labels-config",
            &[
                (VELERO_LABEL, ""),
                ("example.io/labels", "BackupItemAction"),
            ],
            &[("labels", "team=x")],
        ),
        velero(
            "restore-only",
            &[(VELERO_LABEL, ""), ("labels", "RestoreItemAction")],
            &[("labels", "no")],
        ),
        velero(
            "not-plugin-config",
            &[("labels", "BackupItemAction")],
            &[("labels", "no")],
        ),
    ];
    let config = velero_config("p", "labels", &maps).unwrap();
    assert_eq!(config, BTreeMap::from([("labels".into(), "team=x".into())]));
    assert!(velero_config("p", "other", &maps).unwrap().is_empty());

    let twice = [
        maps[0].clone(),
        velero(
            "second",
            &[(VELERO_LABEL, "true"), ("labels", "BackupItemActionV2")],
            &[],
        ),
    ];
    let err = velero_config("p", "labels", &twice).unwrap_err();
    assert!(err.to_string().contains("labels-config, second"), "{err}");
}

#[test]
fn settings_yaml_config_wins_over_velero_config() {
    let spec = parse(&cm(
        "a",
        &[
            ("sha256", &digest()),
            ("settings.yaml", "config: {a: mine}"),
        ],
        true,
    ))
    .unwrap();
    let velero = BTreeMap::from([("a".into(), "velero".into()), ("b".into(), "velero".into())]);
    let settings = merged_settings(&spec, velero);
    assert_eq!(settings.config["a"], "mine");
    assert_eq!(settings.config["b"], "velero");
}

#[test]
fn the_fingerprint_ignores_metadata() {
    let a = cm("a", &[("sha256", &digest())], true);
    let mut annotated = a.clone();
    annotated.metadata.annotations =
        Some(BTreeMap::from([("iar.dev/status".into(), "Ready".into())]));
    annotated.metadata.resource_version = Some("42".into());
    let none = BTreeMap::new();
    assert_eq!(fingerprint(&a, &none), fingerprint(&annotated, &none));
    let changed = cm("a", &[("sha256", &digest()), ("order", "1")], true);
    assert_ne!(fingerprint(&a, &none), fingerprint(&changed, &none));
    let configured = BTreeMap::from([("k".into(), "v".into())]);
    assert_ne!(fingerprint(&a, &none), fingerprint(&a, &configured));
}

#[test]
fn the_manifest_parses_back_and_refuses_what_does_not_fit() {
    let cm = manifest(ManifestInput {
        name: "labels".into(),
        namespace: "iar-system".into(),
        component: BYTES.to_vec(),
        settings: Some("config: {labels: a=b}\n".into()),
        order: Some(5),
        reference: None,
    })
    .unwrap();
    let spec = parse(&cm).unwrap();
    assert_eq!((spec.order, spec.sha256.as_str()), (5, digest().as_str()));
    verify(&spec, BYTES).unwrap();

    let big = vec![0u8; CONFIGMAP_LIMIT];
    let input = ManifestInput {
        name: "big".into(),
        namespace: "iar-system".into(),
        component: big,
        ..ManifestInput::default()
    };
    let err = manifest(input.clone()).unwrap_err();
    assert!(err.to_string().contains("--reference"), "{err}");
    let by_reference = manifest(ManifestInput {
        reference: Some("/plugins/big.wasm".into()),
        ..input
    })
    .unwrap();
    assert!(by_reference.binary_data.is_none());

    let bad = manifest(ManifestInput {
        name: "x".into(),
        settings: Some("limits: {deadline: soon}".into()),
        ..ManifestInput::default()
    })
    .unwrap_err();
    assert!(bad.to_string().contains("plugin-settings"), "{bad}");
}
