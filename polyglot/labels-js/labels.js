// Adds labels and annotations, taken from the plugin's config, to every
// item it applies to when backed up, and annotates each restored item with
// the backup it came from: the JavaScript twin of plugins/labels (Rust),
// with the same config keys, selectors, mutations and error messages.
//
// Config: `labels` and `annotations` are `key=value` lists separated by
// commas (`team=payments,tier=gold`); `resources` narrows which resources it
// applies to (comma-separated, default: all); `restored-from` renames the
// restore's annotation (default `iar.dev/restored-from`), `-` turns it off.
//
// Built by polyglot/build.sh with jco componentize (StarlingMonkey) against
// world `backup-restore-plugin` of wit/v1.3/plugin.wit (iar:plugin@1.3.0).

import { config, log } from "iar:plugin/host@1.3.0";

// A thrown `{ tag, val }` becomes the `err` of the WIT result
// (action-error's `failed` case), as componentize-js maps results.
function failed(message) {
  return { tag: "failed", val: message };
}

// Rust's `{:?}` of a plain string is JSON's quoting of it; they differ only
// for rare escapes, which no config in practice contains.
const quote = (s) => JSON.stringify(s);

function pairs(key) {
  const list = config(key);
  if (list === undefined || list === null) {
    return [];
  }
  const out = [];
  for (const p of list.split(",")) {
    if (p.trim() === "") {
      continue;
    }
    const eq = p.indexOf("=");
    const k = eq < 0 ? "" : p.slice(0, eq).trim();
    if (k === "") {
      throw failed(`config ${key}: ${quote(p)} is not key=value`);
    }
    out.push([k, p.slice(eq + 1).trim()]);
  }
  return out;
}

function isObject(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

// metadata[key], made an object (as is metadata) when absent or not one:
// what the Rust SDK's Item::set_label does.
function metadataMap(item, key) {
  if (!isObject(item.metadata)) {
    item.metadata = {};
  }
  if (!isObject(item.metadata[key])) {
    item.metadata[key] = {};
  }
  return item.metadata[key];
}

function str(v) {
  return typeof v === "string" ? v : "";
}

function selector() {
  const resources = (config("resources") ?? "")
    .split(",")
    .map((r) => r.trim())
    .filter((r) => r !== "");
  return {
    includedNamespaces: [],
    excludedNamespaces: [],
    includedResources: resources,
    excludedResources: [],
    labelSelector: "",
  };
}

function parseItem(itemJson) {
  let item;
  try {
    item = JSON.parse(itemJson);
  } catch (e) {
    throw failed(`item is not JSON: ${e.message}`);
  }
  if (!isObject(item)) {
    throw failed("an item must be a JSON object");
  }
  return item;
}

export const itemAction = {
  appliesTo() {
    return selector();
  },

  execute(itemJson, _backup) {
    const item = parseItem(itemJson);
    const labels = pairs("labels");
    const annotations = pairs("annotations");
    const unchanged = {
      item: undefined,
      additionalItems: [],
      operationId: undefined,
      postOperationItems: [],
    };
    if (labels.length === 0 && annotations.length === 0) {
      return unchanged;
    }
    for (const [k, v] of labels) {
      metadataMap(item, "labels")[k] = v;
    }
    for (const [k, v] of annotations) {
      metadataMap(item, "annotations")[k] = v;
    }
    const meta = isObject(item.metadata) ? item.metadata : {};
    log("debug", `labelled ${str(item.kind)} ${str(meta.name)}`);
    return { ...unchanged, item: JSON.stringify(item) };
  },

  // This action never starts an operation, so no id is one of its own.
  progress(operationId, _backup) {
    throw {
      tag: "unknown-operation",
      val: `this plugin starts no operations (asked for ${quote(operationId)})`,
    };
  },

  cancel(operationId, _backup) {
    throw {
      tag: "unknown-operation",
      val: `this plugin starts no operations (asked to cancel ${quote(operationId)})`,
    };
  },
};

export const restoreItemAction = {
  appliesTo() {
    return selector();
  },

  execute(input) {
    const key = config("restored-from") ?? "iar.dev/restored-from";
    let spec = {};
    try {
      spec = JSON.parse(input.restore.spec);
    } catch (_) {
      spec = {};
    }
    const backup = isObject(spec) ? str(spec.backupName) : "";
    const unchanged = {
      item: undefined,
      additionalItems: [],
      skipRestore: false,
      operationId: undefined,
      waitForAdditionalItems: false,
      additionalItemsReadyTimeoutMs: undefined,
    };
    if (key === "-" || backup === "") {
      return unchanged;
    }
    const item = parseItem(input.item);
    metadataMap(item, "annotations")[key] = backup;
    const meta = isObject(item.metadata) ? item.metadata : {};
    log("debug", `${str(item.kind)} ${str(meta.name)} restored from ${backup}`);
    return { ...unchanged, item: JSON.stringify(item) };
  },

  progress(operationId, _restore) {
    throw {
      tag: "unknown-operation",
      val: `this plugin starts no restore operations (asked for ${quote(operationId)})`,
    };
  },

  cancel(operationId, _restore) {
    throw {
      tag: "unknown-operation",
      val: `this plugin starts no restore operations (asked to cancel ${quote(operationId)})`,
    };
  },

  areAdditionalItemsReady(_items, _restore) {
    return true;
  },
};
