// The metastore web console: a client of the node's native and Iceberg REST APIs.
//
// Everything shown comes from API calls made with the signed-in principal's token,
// so the console shows exactly what that principal may read. Untrusted text (names,
// properties, SQL, error messages) only ever reaches the page as text nodes: `h`
// below never parses markup, and the page's Content-Security-Policy allows no inline
// script, so a table named `<img onerror=...>` is shown, never run.
"use strict";

const TOKEN_KEY = "metastore.console.token";
const SEP = "\u001f"; // namespace level separator in API paths
const PAGE = 100; // items per API page
const MAX_PAGES = 20; // a listing shows at most PAGE * MAX_PAGES items
const FEED_KEEP = 500; // live-feed rows kept on screen

const app = {
  token: sessionStorage.getItem(TOKEN_KEY),
  me: null,
  feed: null, // AbortController of the live feed's stream
  gen: 0, // counts navigations: only the latest one's page is shown
  prefixes: new Map(), // "tenant/catalog" -> Iceberg REST prefix
};

// --- DOM -------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat());
}

// A page function returns what to show; the router shows it only if no later
// navigation started meanwhile (a slow page must not replace a newer one).
function page(...nodes) {
  return nodes.flat();
}

function crumbs(...items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...items.map(([label, href]) => h("a", { href }, label)));
}

function table(headers, rows, attrs) {
  return h(
    "table",
    attrs || {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "none")))
  );
}

function kv(pairs) {
  return h(
    "table",
    { class: "kv" },
    h("tbody", {}, pairs.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v ?? h("span", { class: "muted" }, "—")))))
  );
}

function when(ms) {
  if (ms === null || ms === undefined) return "—";
  return new Date(Number(ms)).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function badge(text) {
  return h("span", { class: `badge ${text}` }, text);
}

function failure(err) {
  return h("p", { class: "error", role: "alert" }, err instanceof ApiError ? `${err.status}: ${err.message}` : String(err));
}

// --- routes as links -------------------------------------------------------------------

const enc = encodeURIComponent;
const nsParam = (levels) => enc(levels.join(SEP));
const link = {
  tenants: () => "#/",
  tenant: (t) => `#/t/${enc(t)}`,
  catalog: (t, c) => `#/t/${enc(t)}/c/${enc(c)}`,
  namespace: (t, c, ns) => `#/t/${enc(t)}/c/${enc(c)}/ns/${nsParam(ns)}`,
  table: (t, c, ns, name) => `#/t/${enc(t)}/c/${enc(c)}/tables/${nsParam(ns)}/${enc(name)}`,
  view: (t, c, ns, name) => `#/t/${enc(t)}/c/${enc(c)}/views/${nsParam(ns)}/${enc(name)}`,
  history: (t, c) => `#/t/${enc(t)}/c/${enc(c)}/history`,
  commit: (t, c, id) => `#/t/${enc(t)}/c/${enc(c)}/commits/${enc(id)}`,
  feed: (t, c) => `#/t/${enc(t)}/c/${enc(c)}/feed`,
  cluster: () => "#/cluster",
};

function entityLink(t, c, kind, path) {
  if (kind === "namespace") return h("a", { href: link.namespace(t, c, path) }, path.join("."));
  const ns = path.slice(0, -1);
  const name = path[path.length - 1];
  if (kind === "table") return h("a", { href: link.table(t, c, ns, name) }, path.join("."));
  if (kind === "view") return h("a", { href: link.view(t, c, ns, name) }, path.join("."));
  return h("span", { class: "mono" }, path.join("."));
}

// --- API -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function authHeaders() {
  return app.token ? { Authorization: `Bearer ${app.token}` } : {};
}

async function api(path, options) {
  const opts = options || {};
  const response = await fetch(path, {
    method: opts.method || "GET",
    headers: { Accept: "application/json", ...authHeaders(), ...(opts.headers || {}) },
    body: opts.body,
  });
  if (response.status === 401 && opts.login !== false) {
    signOut("Your session ended; sign in again.");
    throw new ApiError(401, "not signed in");
  }
  if (!response.ok) {
    let message = response.statusText;
    try {
      const body = await response.json();
      message = (body.error && body.error.message) || body.error_description || message;
    } catch (_) {
      /* not JSON */
    }
    throw new ApiError(response.status, message);
  }
  if (response.status === 204) return null;
  return exact(await response.text());
}

// JSON with 64-bit ids (snapshot ids, commit ids) kept exact: a number beyond 2^53 is
// kept as its source text rather than rounded by the browser.
function exact(text) {
  return JSON.parse(text, (key, value, context) =>
    typeof value === "number" && !Number.isSafeInteger(value) && Number.isInteger(value) && context && context.source
      ? context.source
      : value
  );
}

async function all(path, key) {
  const items = [];
  let token = null;
  for (let page = 0; page < MAX_PAGES; page += 1) {
    const sep = path.includes("?") ? "&" : "?";
    const query = `${sep}pageSize=${PAGE}` + (token ? `&pageToken=${enc(token)}` : "");
    const body = await api(path + query);
    items.push(...body[key]);
    token = body["next-page-token"];
    if (!token) return { items, truncated: false };
  }
  return { items, truncated: true };
}

const native = {
  catalog: (t, c) => `/api/v1/tenants/${enc(t)}/catalogs/${enc(c)}`,
  namespaces: (t, c, parent) =>
    native.catalog(t, c) + "/namespaces" + (parent.length ? `?parent=${nsParam(parent)}` : ""),
  collection: (t, c, ns, kind) => native.catalog(t, c) + `/namespaces/${nsParam(ns)}/${kind}`,
};

async function icebergPrefix(t, c) {
  const key = `${t}/${c}`;
  if (!app.prefixes.has(key)) {
    const config = await api(`/v1/config?warehouse=${enc(key)}`);
    app.prefixes.set(key, (config.overrides && config.overrides.prefix) || c);
  }
  return app.prefixes.get(key);
}

// --- sign-in ---------------------------------------------------------------------------

function signOut(message) {
  app.token = null;
  app.me = null;
  sessionStorage.removeItem(TOKEN_KEY);
  stopFeed();
  renderLogin(message);
}

function renderWho() {
  const who = document.getElementById("who");
  if (!app.me) {
    who.replaceChildren();
    return;
  }
  const out = app.token ? h("button", { class: "secondary", type: "button", onclick: () => signOut("Signed out.") }, "Sign out") : null;
  who.replaceChildren(
    ...[h("a", { href: link.cluster() }, "Node"), h("span", { id: "principal" }, `${app.me.tenant}/${app.me.name}`), out].filter(Boolean)
  );
}

function renderLogin(message) {
  crumbs();
  renderWho();
  const id = h("input", { name: "client_id", id: "client-id", autocomplete: "username", required: true });
  const secret = h("input", { name: "client_secret", id: "client-secret", type: "password", autocomplete: "current-password", required: true });
  const status = h("p", { class: "error", role: "alert", id: "login-error" }, message && message !== "Signed out." ? message : "");
  const form = h(
    "form",
    { class: "login card", id: "login" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Authentication is on: sign in with a principal's client credentials."),
    h("label", { for: "client-id" }, "Client id"),
    id,
    h("label", { for: "client-secret" }, "Client secret"),
    secret,
    h("button", { type: "submit" }, "Sign in"),
    status
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.textContent = "";
    const body = new URLSearchParams({ grant_type: "client_credentials", client_id: id.value, client_secret: secret.value });
    try {
      const response = await fetch("/v1/oauth/tokens", { method: "POST", body });
      const answer = await response.json().catch(() => ({}));
      if (!response.ok || !answer.access_token) {
        status.textContent = answer.error_description || (answer.error && answer.error.message) || "sign-in refused";
        return;
      }
      app.token = answer.access_token;
      sessionStorage.setItem(TOKEN_KEY, app.token);
      await start();
    } catch (err) {
      status.textContent = String(err);
    }
  });
  show(form);
}

// --- pages -----------------------------------------------------------------------------

async function pageTenants() {
  crumbs(["tenants", link.tenants()]);
  const { items } = await all("/api/v1/tenants", "tenants");
  if (items.length === 1) {
    location.replace(link.tenant(items[0].name));
    return;
  }
  return page(
    h("h1", {}, "Tenants"),
    table(["Tenant", "Created", "Properties"], items.map((t) =>
      h("tr", {}, h("td", {}, h("a", { href: link.tenant(t.name) }, t.name)), h("td", {}, when(t["created-at-ms"])), h("td", {}, Object.keys(t.properties).length))
    ), { id: "tenants" })
  );
}

async function pageTenant(t) {
  crumbs([t, link.tenant(t)]);
  const { items } = await all(`/api/v1/tenants/${enc(t)}/catalogs`, "catalogs");
  return page(
    h("h1", {}, `Catalogs of ${t}`),
    table(["Catalog", "Created", "Updated"], items.map((c) =>
      h("tr", {}, h("td", {}, h("a", { href: link.catalog(t, c.name) }, c.name)), h("td", {}, when(c["created-at-ms"])), h("td", {}, when(c["updated-at-ms"])))
    ), { id: "catalogs" })
  );
}

function tabs(t, c, active) {
  const tab = (name, href) => h("a", { href, class: active === name ? "active" : null }, name);
  return h("nav", { class: "tabs" }, tab("Browse", link.catalog(t, c)), tab("History", link.history(t, c)), tab("Live feed", link.feed(t, c)));
}

function catalogCrumbs(t, c, ...more) {
  crumbs([t, link.tenant(t)], [c, link.catalog(t, c)], ...more);
}

// The namespace tree: children are fetched when a node is opened.
function treeNode(t, c, levels) {
  const children = h("ul", { hidden: true });
  let loaded = false;
  const toggle = h("button", { class: "toggle", type: "button", "aria-label": "expand" }, "▸");
  toggle.addEventListener("click", async () => {
    const open = children.hidden;
    children.hidden = !open;
    toggle.textContent = open ? "▾" : "▸";
    if (open && !loaded) {
      loaded = true;
      try {
        const { items } = await all(native.namespaces(t, c, levels), "namespaces");
        children.replaceChildren(...items.map((n) => treeNode(t, c, n.namespace)));
        if (!items.length) toggle.textContent = " ";
      } catch (err) {
        children.replaceChildren(h("li", {}, failure(err)));
      }
    }
  });
  return h("li", { "data-ns": levels.join(".") }, toggle, h("a", { href: link.namespace(t, c, levels) }, levels[levels.length - 1]), children);
}

async function tree(t, c) {
  const { items } = await all(native.namespaces(t, c, []), "namespaces");
  return h("div", { class: "tree card", id: "tree" }, h("strong", {}, "Namespaces"), h("ul", {}, items.map((n) => treeNode(t, c, n.namespace))));
}

async function pageCatalog(t, c) {
  catalogCrumbs(t, c);
  const [side, info] = await Promise.all([tree(t, c), api(native.catalog(t, c)).catch((err) => err)]);
  const details = info instanceof Error ? failure(info) : kv(Object.entries(info.properties || {}).map(([k, v]) => [k, h("code", {}, v)]));
  return page(h("h1", {}, `Catalog ${c}`), tabs(t, c, "Browse"), h("div", { class: "layout" }, side, h("div", {}, h("h2", {}, "Properties"), details)));
}

async function listing(t, c, ns, kind) {
  try {
    return await all(native.collection(t, c, ns, kind), kind);
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) return { items: [], denied: true };
    throw err;
  }
}

// Dropped tables or views still kept (restorable): the first page of a listing with
// include-dropped carries all of them, newest drop first.
async function dropped(t, c, ns, kind) {
  const body = await api(native.collection(t, c, ns, kind) + `?include-dropped=true&pageSize=1`);
  return body.dropped || [];
}

async function undrop(t, c, ns, kind, entity) {
  const body = entity["entity-id"] ? JSON.stringify({ "entity-id": entity["entity-id"] }) : undefined;
  await api(native.collection(t, c, ns, kind) + `/${enc(entity.name)}/undrop`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body,
  });
}

async function pageNamespace(t, c, ns) {
  catalogCrumbs(t, c, [ns.join("."), link.namespace(t, c, ns)]);
  const [side, info, children, tables, views, droppedTables, droppedViews] = await Promise.all([
    tree(t, c),
    api(native.catalog(t, c) + `/namespaces/${nsParam(ns)}`),
    all(native.namespaces(t, c, ns), "namespaces"),
    listing(t, c, ns, "tables"),
    listing(t, c, ns, "views"),
    dropped(t, c, ns, "tables"),
    dropped(t, c, ns, "views"),
  ]);
  const entityRows = (items, kind) =>
    items.map((e) => h("tr", {}, h("td", {}, entityLink(t, c, kind, [...ns, e.name])), h("td", {}, e.version), h("td", {}, when(e["updated-at-ms"]))));
  const droppedRows = (items, kind) =>
    items.map((e) => {
      const button = h("button", { type: "button", class: "secondary", "data-undrop": e.name }, "Undrop");
      button.addEventListener("click", async () => {
        button.disabled = true;
        try {
          await undrop(t, c, ns, kind, e);
          await route();
        } catch (err) {
          button.replaceWith(failure(err));
        }
      });
      return h("tr", {}, h("td", {}, `${kind.slice(0, -1)} ${e.name}`), h("td", {}, when(e["dropped-at-ms"])), h("td", {}, e["dropped-by"] || "—"), h("td", {}, button));
    });
  const droppedAll = [...droppedRows(droppedTables, "tables"), ...droppedRows(droppedViews, "views")];
  return page(
    h("h1", {}, `Namespace ${ns.join(".")}`),
    tabs(t, c, "Browse"),
    h(
      "div",
      { class: "layout" },
      side,
      h(
        "div",
        {},
        h("h2", {}, "Namespaces"),
        table(["Namespace", "Version", "Updated"], children.items.map((n) =>
          h("tr", {}, h("td", {}, entityLink(t, c, "namespace", n.namespace)), h("td", {}, n.version), h("td", {}, when(n["updated-at-ms"])))
        ), { id: "namespaces" }),
        h("h2", {}, "Tables"),
        table(["Table", "Version", "Updated"], entityRows(tables.items, "table"), { id: "tables" }),
        h("h2", {}, "Views"),
        table(["View", "Version", "Updated"], entityRows(views.items, "view"), { id: "views" }),
        droppedAll.length ? [h("h2", {}, "Dropped"), table(["Entity", "Dropped", "By", ""], droppedAll, { id: "dropped" })] : null,
        h("h2", {}, "Properties"),
        kv(Object.entries(info.properties).map(([k, v]) => [k, h("code", {}, v)]))
      )
    )
  );
}

function schemaTable(schema) {
  return table(["Id", "Name", "Type", "Required"], (schema ? schema.fields : []).map((f) =>
    h("tr", {}, h("td", {}, f.id), h("td", {}, f.name), h("td", { class: "mono" }, typeof f.type === "string" ? f.type : JSON.stringify(f.type)), h("td", {}, f.required ? "yes" : "no"))
  ), { id: "schema" });
}

function timeline(snapshots, currentId) {
  if (!snapshots.length) return h("p", { class: "muted" }, "no snapshots");
  const times = snapshots.map((s) => s["timestamp-ms"]);
  const first = Math.min(...times);
  const span = Math.max(...times) - first || 1;
  const bar = h("div", { class: "timeline", id: "timeline", "aria-label": "snapshot timeline" });
  for (const s of snapshots) {
    const dot = h("span", { class: s["snapshot-id"] === currentId ? "dot current" : "dot", title: `${s["snapshot-id"]} ${s.summary ? s.summary.operation : ""} ${when(s["timestamp-ms"])}` });
    dot.style.left = `${2 + (96 * (s["timestamp-ms"] - first)) / span}%`;
    bar.append(dot);
  }
  return bar;
}

async function pageTable(t, c, ns, name) {
  catalogCrumbs(t, c, [ns.join("."), link.namespace(t, c, ns)], [name, link.table(t, c, ns, name)]);
  const prefix = await icebergPrefix(t, c);
  const loaded = await api(`/v1/${enc(prefix)}/namespaces/${nsParam(ns)}/tables/${enc(name)}`);
  const m = loaded.metadata;
  const schema = (m.schemas || []).find((s) => s["schema-id"] === m["current-schema-id"]);
  const spec = (m["partition-specs"] || []).find((s) => s["spec-id"] === m["default-spec-id"]);
  const snapshots = [...(m.snapshots || [])].sort((a, b) => a["timestamp-ms"] - b["timestamp-ms"]);
  const current = m["current-snapshot-id"];
  return page(
    h("h1", {}, `Table ${[...ns, name].join(".")}`),
    tabs(t, c, "Browse"),
    kv([
      ["Metadata location", h("code", { id: "metadata-location" }, loaded["metadata-location"])],
      ["Location", h("code", {}, m.location)],
      ["Format version", m["format-version"]],
      ["Table UUID", h("code", {}, m["table-uuid"])],
      ["Current snapshot", current && current !== -1 ? h("code", {}, current) : null],
      ["Last updated", when(m["last-updated-ms"])],
    ]),
    h("h2", {}, "Schema"),
    schemaTable(schema),
    h("h2", {}, "Partition spec"),
    table(["Name", "Transform", "Source field"], (spec ? spec.fields : []).map((f) =>
      h("tr", {}, h("td", {}, f.name), h("td", { class: "mono" }, f.transform), h("td", {}, f["source-id"]))
    ), { id: "partition-spec" }),
    h("h2", {}, `Snapshots (${snapshots.length})`),
    timeline(snapshots, current),
    table(["Snapshot", "Time", "Operation", "Added records", "Total records", "Parent"], [...snapshots].reverse().map((s) => {
      const summary = s.summary || {};
      return h("tr", { class: s["snapshot-id"] === current ? "current" : null },
        h("td", { class: "mono" }, s["snapshot-id"]), h("td", {}, when(s["timestamp-ms"])), h("td", {}, summary.operation || "—"),
        h("td", {}, summary["added-records"] || "0"), h("td", {}, summary["total-records"] || "—"), h("td", { class: "mono" }, s["parent-snapshot-id"] || "—"));
    }), { id: "snapshots" }),
    h("h2", {}, "Properties"),
    kv(Object.entries(m.properties || {}).map(([k, v]) => [k, h("code", {}, v)]))
  );
}

async function pageView(t, c, ns, name) {
  catalogCrumbs(t, c, [ns.join("."), link.namespace(t, c, ns)], [name, link.view(t, c, ns, name)]);
  const prefix = await icebergPrefix(t, c);
  const loaded = await api(`/v1/${enc(prefix)}/namespaces/${nsParam(ns)}/views/${enc(name)}`);
  const m = loaded.metadata;
  const version = (m.versions || []).find((v) => v["version-id"] === m["current-version-id"]) || {};
  const schema = (m.schemas || []).find((s) => s["schema-id"] === version["schema-id"]);
  return page(
    h("h1", {}, `View ${[...ns, name].join(".")}`),
    tabs(t, c, "Browse"),
    kv([
      ["Metadata location", h("code", { id: "metadata-location" }, loaded["metadata-location"])],
      ["Current version", version["version-id"]],
      ["Versions", (m.versions || []).length],
    ]),
    h("h2", {}, "SQL"),
    (version.representations || []).map((r) => h("div", { class: "card" }, h("div", { class: "muted" }, r.dialect), h("pre", { class: "mono" }, r.sql))),
    h("h2", {}, "Schema"),
    schemaTable(schema),
    h("h2", {}, "Properties"),
    kv(Object.entries(m.properties || {}).map(([k, v]) => [k, h("code", {}, v)]))
  );
}

async function pageHistory(t, c) {
  catalogCrumbs(t, c, ["history", link.history(t, c)]);
  const body = await api(native.catalog(t, c) + `/commits?pageSize=${PAGE}`);
  return page(
    h("h1", {}, `History of ${c}`),
    tabs(t, c, "History"),
    table(["Seq", "Commit", "Time", "Principal", "Operation", "Changes"], body.commits.map((commit) =>
      h("tr", { "data-commit": commit.id },
        h("td", {}, commit.seq),
        h("td", {}, h("a", { class: "mono", href: link.commit(t, c, commit.id) }, commit.id)),
        h("td", {}, when(commit["timestamp-ms"])),
        h("td", {}, commit.principal),
        h("td", {}, commit.operation),
        h("td", {}, commit.changes.map((ch) => h("div", {}, badge(ch.action), " ", ch.kind, " ", ch.path.join(".")))))
    ), { id: "history" }),
    body["next-page-token"] ? h("p", { class: "muted" }, `Showing the newest ${PAGE} commits.`) : null
  );
}

function flatten(value, prefix, out) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out.set(prefix, Array.isArray(value) ? value.join(", ") : value === null ? "" : String(value));
  }
  return out;
}

function diffTable(before, after) {
  const a = flatten(before || {}, "", new Map());
  const b = flatten(after || {}, "", new Map());
  const keys = [...new Set([...a.keys(), ...b.keys()])].filter((k) => a.get(k) !== b.get(k)).sort();
  return table(["Field", "Before", "After"], keys.map((k) =>
    h("tr", {}, h("td", { class: "mono" }, k), h("td", { class: "before mono" }, a.get(k) ?? ""), h("td", { class: "after mono" }, b.get(k) ?? ""))
  ), { class: "diff" });
}

async function pageCommit(t, c, id) {
  catalogCrumbs(t, c, ["history", link.history(t, c)], [id, link.commit(t, c, id)]);
  const body = await api(native.catalog(t, c) + `/commits/${enc(id)}/diff`);
  const commit = body.commit;
  return page(
    h("h1", {}, `Commit ${commit.id}`),
    tabs(t, c, "History"),
    kv([
      ["Sequence", commit.seq],
      ["Time", when(commit["timestamp-ms"])],
      ["Principal", commit.principal],
      ["Operation", commit.operation],
      ["Parent", commit.parent ? h("a", { class: "mono", href: link.commit(t, c, commit.parent) }, commit.parent) : null],
    ]),
    h("div", { id: "changes" }, body.changes.map((ch) =>
      h("section", { class: "change" },
        h("h2", {}, badge(ch.action), " ", ch.kind, " ", entityLink(t, c, ch.kind, ch.path)),
        ch.hidden ? h("p", { class: "muted" }, "You may not read this entity.")
          : ch.kind === "system" ? h("p", { class: "muted" }, "A catalog record.")
          : diffTable(ch.before, ch.after))
    ))
  );
}

// --- live feed -------------------------------------------------------------------------

function stopFeed() {
  if (app.feed) app.feed.abort();
  app.feed = null;
}

function eventRow(t, c, event) {
  const name = event.name || [];
  return h("tr", { "data-event": event.id },
    h("td", {}, when(event["time-us"] / 1000)),
    h("td", {}, badge(event.operation)),
    h("td", {}, event.kind),
    h("td", {}, entityLink(t, c, event.kind, name), event["previous-name"] ? ` (was ${event["previous-name"].join(".")})` : ""),
    h("td", {}, event.principal),
    h("td", {}, event["snapshot-id"] ? `${event["snapshot-operation"] || ""} ${event["snapshot-id"]}` : ""),
    h("td", {}, h("a", { class: "mono", href: link.commit(t, c, event["commit-id"]) }, event["commit-id"]))
  );
}

// Server-Sent Events read with fetch, so the request carries the bearer token
// (EventSource cannot send an Authorization header).
async function follow(url, controller, onEvent, onStatus) {
  let last = null;
  for (;;) {
    try {
      const headers = { Accept: "text/event-stream", ...authHeaders() };
      if (last) headers["Last-Event-ID"] = last;
      const response = await fetch(url, { headers, signal: controller.signal });
      if (!response.ok) throw new ApiError(response.status, response.statusText);
      onStatus("live");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("id:")) last = line.slice(3).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (data) onEvent(exact(data));
        }
      }
      onStatus("reconnecting");
    } catch (err) {
      if (controller.signal.aborted) return;
      onStatus(err instanceof ApiError && err.status === 403 ? "denied" : "reconnecting");
      if (err instanceof ApiError && err.status < 500 && err.status !== 408) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
    if (controller.signal.aborted) return;
  }
}

async function pageFeed(t, c) {
  catalogCrumbs(t, c, ["live feed", link.feed(t, c)]);
  const status = h("span", { class: "feed-status", id: "feed-status" }, "connecting…");
  const body = h("tbody", {});
  const rows = h("table", { id: "feed" },
    h("thead", {}, h("tr", {}, ["Time", "Operation", "Kind", "Entity", "Principal", "Snapshot", "Commit"].map((x) => h("th", {}, x)))),
    body);
  const controller = new AbortController();
  app.feed = controller;
  // from now on, newest on top (the History tab has what came before)
  const url = native.catalog(t, c) + "/events?after=head";
  follow(url, controller, (event) => {
    body.prepend(eventRow(t, c, event));
    while (body.childElementCount > FEED_KEEP) body.lastElementChild.remove();
  }, (state) => {
    status.textContent = state === "live" ? "live" : state === "denied" ? "you may not follow this catalog" : "reconnecting…";
    status.className = `feed-status ${state}`;
  });
  return page(h("h1", {}, `Live changes in ${c}`), tabs(t, c, "Live feed"), h("p", {}, status), rows);
}

// --- cluster ---------------------------------------------------------------------------

async function pageCluster() {
  crumbs(["node", link.cluster()]);
  const health = await api("/health").catch((err) => err);
  // the cluster's layout is a service admin's (anyone else is shown the node's health)
  const admin = !app.token || app.me["service-admin"];
  const status = admin ? await api("/api/v1/admin/cluster").catch((err) => err) : new ApiError(403, "");
  const parts = [h("h1", {}, "Node")];
  if (!(health instanceof Error)) parts.push(kv(Object.entries(health).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : String(v)])));
  if (status instanceof Error) {
    parts.push(h("p", { class: "muted" }, status.status === 403 ? "The cluster's layout is shown to service admins." : failure(status)));
  } else if (status.mode === "cluster") {
    const me = status.node;
    parts.push(
      h("h2", {}, "This node's view"),
      kv([
        ["URL", h("code", {}, me.url)],
        ["Caught up", me["caught-up"] ? "yes" : "no"],
        ["View lag", h("span", { id: "view-lag" }, `${me["view-lag-records"]} records, ${me["view-lag-seconds"]} s`)],
        ["Owned partitions", me["owned-partitions"].join(", ") || "none"],
      ]),
      h("h2", {}, "Nodes"),
      table(["Node", "Owned partitions"], status.nodes.map((n) => h("tr", {}, h("td", { class: "mono" }, n.url), h("td", {}, n.partitions.join(", ")))), { id: "nodes" }),
      h("h2", {}, "Partitions"),
      table(["Partition", "Owner", "Owner since", "Applied (refs / objects)"], status.partitions.map((p) =>
        h("tr", {}, h("td", {}, p.partition), h("td", { class: "mono" }, p.owner || "—"), h("td", {}, when(p["owner-since-ms"])), h("td", {}, `${p["applied-offsets"].refs} / ${p["applied-offsets"].objects}`))
      ), { id: "partitions" })
    );
  } else {
    parts.push(h("p", { class: "muted", id: "embedded" }, "Embedded mode: one node, no partitions."));
  }
  return page(parts);
}

// --- router ----------------------------------------------------------------------------

function parseNs(raw) {
  return decodeURIComponent(raw).split(SEP);
}

async function route() {
  stopFeed();
  app.gen += 1;
  const gen = app.gen;
  const nodes = await pageFor();
  if (gen === app.gen && nodes) show(nodes);
}

async function pageFor() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "");
  const d = (i) => decodeURIComponent(parts[i]);
  try {
    if (parts.length === 0) return await pageTenants();
    if (parts[0] === "cluster") return await pageCluster();
    if (parts[0] !== "t") throw new ApiError(404, "no such page");
    if (parts.length === 2) return await pageTenant(d(1));
    if (parts[2] !== "c") throw new ApiError(404, "no such page");
    const [t, c] = [d(1), d(3)];
    if (parts.length === 4) return await pageCatalog(t, c);
    const section = parts[4];
    if (section === "ns" && parts.length === 6) return await pageNamespace(t, c, parseNs(parts[5]));
    if (section === "tables" && parts.length === 7) return await pageTable(t, c, parseNs(parts[5]), d(6));
    if (section === "views" && parts.length === 7) return await pageView(t, c, parseNs(parts[5]), d(6));
    if (section === "history" && parts.length === 5) return await pageHistory(t, c);
    if (section === "commits" && parts.length === 6) return await pageCommit(t, c, d(5));
    if (section === "feed" && parts.length === 5) return await pageFeed(t, c);
    throw new ApiError(404, "no such page");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return undefined;
    return page(h("h1", {}, "Not available"), failure(err));
  }
}

async function start() {
  const auth = document.querySelector('meta[name="metastore-auth"]');
  if (auth && auth.content === "on" && !app.token) {
    renderLogin("");
    return;
  }
  try {
    app.me = await api("/api/v1/whoami", { login: false });
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      app.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      renderLogin("");
      return;
    }
    show(failure(err));
    return;
  }
  renderWho();
  await route();
}

window.addEventListener("hashchange", () => {
  if (app.me) route();
});
start();
