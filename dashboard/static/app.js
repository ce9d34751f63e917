// Gateway dashboard: polls api/overview (relative to the page) and renders
// it. Plain DOM, textContent only (no HTML from data), no network access
// beyond this origin.
"use strict";
(function () {
  const HISTORY = 60;
  const $ = (id) => document.getElementById(id);
  const series = { requests: [], denials: [], backlog: [] };
  let last = null;      // previous counters sample {t, requests, denials}
  let timer = null;
  let refreshMS = 1000;
  let paused = false;
  let data = null;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) {
      if (k === "class") e.className = attrs[k];
      else if (k === "text") e.textContent = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  function fmt(n) {
    if (n == null || isNaN(n)) return "–";
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
    return Number.isInteger(n) ? String(n) : n.toFixed(n < 10 ? 2 : 1);
  }
  function fmtBytes(n) {
    if (!n) return "–";
    if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
    if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
    return n + " B";
  }
  function pct(r) { return r == null ? "–" : (r * 100).toFixed(1) + "%"; }
  function setText(id, v) { const e = $(id); if (e && e.textContent !== String(v)) e.textContent = v; }

  function push(name, v) {
    const s = series[name];
    s.push(v);
    while (s.length > HISTORY) s.shift();
  }
  const SVGNS = "http://www.w3.org/2000/svg";
  function spark(id, values, label) {
    const svg = $(id);
    if (!svg) return;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const max = Math.max(1e-9, ...values);
    const n = values.length;
    if (n === 0) return;
    // At least 15 steps wide, so that the first seconds do not stretch.
    const W = 120, H = 32, step = W / Math.max(15, n - 1);
    const x0 = W - (n - 1) * step;
    const pts = values.map((v, i) => (x0 + i * step).toFixed(2) + "," + (H - 1 - (v / max) * (H - 3)).toFixed(2));
    const area = document.createElementNS(SVGNS, "polygon");
    area.setAttribute("points", x0.toFixed(2) + "," + H + " " + pts.join(" ") + " " + W + "," + H);
    const line = document.createElementNS(SVGNS, "polyline");
    line.setAttribute("points", pts.join(" "));
    const title = document.createElementNS(SVGNS, "title");
    title.textContent = label + ": now " + fmt(values[n - 1]) + ", peak " + fmt(Math.max(...values)) + " over the last " + n + " samples";
    svg.append(title, area, line);
    svg.setAttribute("aria-label", title.textContent);
  }

  function badge(d) {
    const b = el("span", { class: "badge " + d.name, title: d.detail ? d.name + ": " + d.detail : d.name }, d.name);
    if (d.detail) b.append(" ", el("small", { text: d.detail }));
    return b;
  }

  function fill(tbody, rows, emptyText, cols) {
    const frag = document.createDocumentFragment();
    if (rows.length === 0) {
      frag.append(el("tr", { class: "empty" }, el("td", { colspan: String(cols), text: emptyText })));
    } else rows.forEach((r) => frag.append(r));
    tbody.replaceChildren(frag);
  }

  function renderRoutes(o) {
    const rows = o.routes.map((r) => {
      const duties = el("td");
      r.duties.forEach((d) => duties.append(badge(d)));
      const tr = el("tr", { "data-source": r.source },
        el("td", { class: "mono", text: r.server }),
        el("td", { class: "mono", text: r.match.length ? r.match.join(" → ") : "(all requests)" }),
        duties,
        el("td", { class: "mono", text: (r.upstreams || []).join(", ") }),
        el("td", { text: r.source + (r.id ? " · " + r.id : "") }));
      return tr;
    });
    fill($("routes").tBodies[0], rows, "no routes", 5);
    setText("routes-note", o.routes_error ? "could not read the config: " + o.routes_error : o.routes.length + " routes in the running config");
  }

  function renderFastPath(o) {
    const fp = o.fast_path || [];
    // per route: on the plan (with the modules it runs as Caddy calls
    // them), or on Caddy's path with the reason
    const routeText = (r) => "route " + r.route + ": " + (r.plan
      ? "plan" + (r.as_caddy_calls_it ? " (as Caddy calls them: " + r.as_caddy_calls_it.join(", ") + ")" : "")
      : "Caddy's path: " + r.reason);
    const rows = fp.map((s) => el("tr", { "data-fastpath": s.on ? "on" : "off" },
      el("td", { class: "mono", text: s.server }),
      el("td", { text: s.on ? "on" : "off: " + s.reason }),
      el("td", { class: "mono", text: (s.routes || []).map(routeText).join("; ") }),
      el("td", { text: String(s.served) }),
      el("td", { text: String(s.delegated || 0) }),
      el("td", { text: String(s.refused) }),
      el("td", { text: String(s.handed_off) })));
    fill($("fastpath").tBodies[0], rows, "no server has the apigate listener wrapper", 7);
    setText("fastpath-note", fp.length ? "counts of the running config (docs/fastpath.md)" : "");
  }

  // oidc_login's counters: sessions held by this gateway, logins by
  // result, requests checked, refreshes, sessions ended on the server
  function renderSessions(o) {
    const s = o.sessions || { logins: {}, checks: {}, refreshes: {}, revocations: {} };
    const sum = (m, skip) => Object.keys(m || {}).filter((k) => k !== skip).reduce((a, k) => a + m[k], 0);
    const logins = (s.logins || {}).success || 0;
    const failed = sum(s.logins, "success");
    const used = logins + failed + sum(s.checks);
    const failures = Object.keys(s.logins || {}).filter((k) => k !== "success" && s.logins[k])
      .map((k) => k + " " + fmt(s.logins[k])).join(" · ");
    fill($("sessions").tBodies[0], used ? [el("tr", null,
      el("td", { class: "num", text: fmt(s.sessions || 0) }), el("td", { class: "num", text: fmt(logins) }),
      el("td", { class: "num", text: fmt(failed) }), el("td", { class: "num", text: fmt((s.checks || {}).session || 0) }),
      el("td", { class: "num", text: fmt((s.checks || {}).no_session || 0) }),
      el("td", { class: "num", text: fmt((s.checks || {}).csrf_refused || 0) }),
      el("td", { class: "num", text: fmt(sum(s.refreshes)) }), el("td", { class: "num", text: fmt(sum(s.revocations)) }))] : [],
      "no oidc_login has run", 8);
    setText("sessions-note", failures ? "failed logins: " + failures : "");
  }

  function renderQuota(o) {
    const q = o.quota || { enabled: false, top: [], near_limit: [], decisions: {} };
    const near = (u) => u.limit ? u.limit + " " + pct(u.used) : "–";
    fill($("quota-top").tBodies[0], (q.top || []).map((u) => el("tr", null,
      el("td", { class: "mono", text: u.consumer }), el("td", { text: u.plan }),
      el("td", { class: "num", text: fmt(u.day) }), el("td", { class: "num", text: fmt(u.month) }),
      el("td", { class: "num", text: fmt(u.refused) }), el("td", { text: near(u) }))),
      q.enabled ? "no requests today" : "no quota global option", 6);
    fill($("quota-near").tBodies[0], (q.near_limit || []).map((u) => el("tr", { "data-near": u.used >= 1 ? "full" : "near" },
      el("td", { class: "mono", text: u.consumer }), el("td", { text: u.plan }), el("td", { text: u.limit }),
      el("td", { class: "num", text: pct(u.used) }), el("td", { class: "num", text: fmt(u.day) }),
      el("td", { class: "num", text: fmt(u.month) }))),
      q.enabled ? "no consumer near a limit" : "no quota global option", 6);
    const d = q.decisions || {};
    let note = "";
    if (q.enabled) {
      note = q.consumers + " consumers on this gateway · " + q.date + " (" + q.timezone + ") · admitted " + fmt(d.admitted || 0) +
        " · refused " + fmt(d.refused || 0) + (d.would_refuse ? " · would refuse (dry run) " + fmt(d.would_refuse) : "");
      if (q.fleet) note += " · fleet: " + q.fleet.gateways + " gateways, counts shared";
      if (q.error) note += " · " + q.error;
    }
    setText("quota-note", note);
    const f = $("quota-fleet");
    if (q.fleet && !q.fleet.available) {
      f.textContent = "NATS unreachable since " + new Date(q.fleet.since).toLocaleTimeString() + ": gateway " + q.fleet.node +
        " admits its share (" + pct(q.fleet.share) + ") of each consumer's remaining quota alone, then " +
        (q.fleet.on_unavailable === "fail_closed" ? "refuses (fail_closed)" : "admits on (fail_open)");
      f.hidden = false;
    } else f.hidden = true;
  }

  // one row per operation of each OpenAPI document: what a rollout of
  // enforcement would refuse (violations of requests) and the most
  // common violation, then the requests no operation declares
  function renderOpenAPI(o) {
    const specs = o.openapi || [];
    const rows = [];
    const share = (n, of) => of ? " (" + (100 * n / of).toFixed(1) + "%)" : "";
    specs.forEach((s) => {
      const doc = s.spec + (s.load_error ? " — reload failed: " + s.load_error : "");
      const ops = (s.operations || []).concat([s.undeclared_requests]);
      ops.forEach((op) => {
        if (!op) return;
        const mc = op.most_common;
        rows.push(el("tr", { "data-operation": op.operation },
          el("td", { class: "mono", text: doc }),
          el("td", { class: "mono", text: op.operation + (op.method ? " · " + op.method + " " + op.path : "") }),
          el("td", { class: "num", text: String(op.requests) }),
          el("td", { class: "num", text: String(op.violations) + share(op.violations, op.requests) }),
          el("td", { class: "num", text: String(op.refused) }),
          el("td", { class: "num", text: String(op.would_refuse) }),
          el("td", { class: "num", text: String(op.response_violations) }),
          el("td", { class: "mono", text: mc ? mc.location + " " + mc.keyword + " ×" + mc.count : "–" })));
      });
    });
    fill($("openapi").tBodies[0], rows, "no openapi handler in the running config", 8);
    setText("openapi-note", specs.map((s) => (s.title || s.spec) + " " + s.openapi + ": request " + s.request +
      ", response " + s.response + ", undeclared " + s.undeclared).join("; "));
  }

  // dur formats nanoseconds as the largest whole unit: 1m, 90s, 2h.
  function dur(ns) {
    const s = ns / 1e9;
    if (s >= 3600 && s % 3600 === 0) return s / 3600 + "h";
    if (s >= 60 && s % 60 === 0) return s / 60 + "m";
    return s + "s";
  }

  function routerText(r) {
    let s = r.path_prefix;
    if (r.hosts && r.hosts.length) s = r.hosts.join(",") + s;
    if (r.methods && r.methods.length) s = r.methods.join(",") + " " + s;
    const extras = [];
    extras.push(r.auth_required ? "auth" : "no auth");
    if (r.roles && r.roles.length) extras.push("roles " + r.roles.join(","));
    if (r.rate_limit) extras.push("rate " + r.rate_limit.events + "/" + dur(r.rate_limit.window));
    if (r.permission) extras.push("permission");
    if (!r.audit) extras.push("no audit");
    if (r.strip_prefix) extras.push("strip");
    return r.name + ": " + s + " (" + extras.join(", ") + ")";
  }

  function renderContainers(o) {
    const c = o.containers;
    setText("stat-routed", c.enabled ? c.routed : "–");
    setText("stat-rejected", c.enabled ? c.rejected : "–");
    let eng = "discovery not configured";
    if (c.enabled) {
      eng = (c.engine_reachable ? "engine reachable" : "engine UNREACHABLE") + (c.engine ? " at " + c.engine : "") + " · server " + c.server;
      if (c.scope && c.scope.length) eng += " · scope " + c.scope.join(" ") + (c.out_of_scope ? " (" + c.out_of_scope + " other labelled container" + (c.out_of_scope === 1 ? "" : "s") + " left alone)" : "");
      if (c.last_list) eng += " · listed " + new Date(c.last_list).toLocaleTimeString();
      if (c.from_state_file) eng += " · routes from state file";
      const f = c.fleet;
      if (f) {
        const live = (f.nodes || []).filter((n) => !n.expired);
        eng += " · fleet " + f.node + (f.connected ? "" : " (NATS UNREACHABLE: keeping the last merged set)") +
          ", " + live.length + " other host" + (live.length === 1 ? "" : "s") +
          (live.length ? " (" + live.map((n) => n.node + (n.restarting ? " restarting" : "") + ": " + n.containers).join(", ") + ")" : "");
        if (f.last_error) eng += " · fleet error: " + f.last_error;
      }
    }
    setText("stat-engine", eng);
    // Another gateway with this node name: the two overwrite each other's
    // containers in the fleet bucket.
    const namesakes = (c.enabled && c.fleet && c.fleet.namesakes) || [];
    setText("fleet-conflict", namesakes.length ? "Fleet node name conflict: " +
      namesakes.map((n) => "another gateway" + (n.advertise ? " (advertise " + n.advertise + ")" : "")).join(", ") +
      " also publishes as node " + c.fleet.node + ", and each overwrites the other's containers. Give each gateway its own node in its fleet options (node defaults to the host name)." : "");
    $("fleet-conflict").hidden = namesakes.length === 0;
    const note = [];
    if (c.enabled && !c.engine_reachable) note.push("no container engine answers" + (c.engine ? " at " + c.engine : "") +
      ": start Docker or Podman's API service (podman system service), or point the docker app's host at the engine; the gateway keeps serving its own routes" +
      (c.from_state_file ? " and the last good discovered routes" : ""));
    if (c.last_error) note.push("last error: " + c.last_error);
    (c.placement || []).forEach((w) => note.push("placement: " + w));
    (c.warnings || []).forEach((w) => note.push("warning: " + w));
    setText("containers-note", note.join(" · "));
    const rows = c.items.map((it) => {
      const why = el("td", { class: "why" });
      if (it.errors && it.errors.length) {
        const ul = el("ul", { class: "errs" });
        it.errors.forEach((e) => ul.append(el("li", { text: e.label + (e.value !== undefined && e.value !== "" ? "=" + JSON.stringify(e.value) : "") + ": " + e.reason })));
        why.append(ul);
      }
      if (it.reason) why.append(el("span", { text: it.reason }));
      const routers = el("td", { class: "mono" });
      (it.routers || []).forEach((r, i) => { if (i) routers.append(el("br")); routers.append(routerText(r)); });
      const labels = Object.keys(it.labels || {}).sort().map((k) => k + "=" + it.labels[k]).join("\n");
      const tr = el("tr", { class: it.state, "data-state": it.state, "data-name": it.name },
        el("td", { class: "mono", title: labels, text: it.name + " " }),
        el("td", null, el("span", { class: "state " + it.state, text: it.state + (it.health ? " · " + it.health : "") })),
        el("td", { class: "mono", text: it.service ? it.service + " → " + it.upstream : "" }),
        routers, why);
      tr.firstChild.append(el("span", { class: "muted", text: it.id + (it.node ? " @ " + it.node : "") }));
      // hidden label text so that the filter finds containers by label
      tr.dataset.search = labels;
      return tr;
    });
    fill($("containers").tBodies[0], rows, c.enabled ? "no opted-in containers" : "discovery (the docker app) is not configured", 5);
  }

  // renderCanaries: one line per side (stable, canary) of each release,
  // with its share of the answers in the window, error rate and P99.
  function renderCanaries(o) {
    const cs = (o.containers && o.containers.canaries) || [];
    const rows = [];
    cs.forEach((c) => {
      let why = "";
      if (c.state === "rolled_back") why = "rolled back" + (c.by ? " by " + c.by : "") + ": " + (c.reason || "");
      else if (c.state === "complete") why = "complete: the canary takes every request" + (c.by ? " (" + c.by + ")" : "");
      else if (c.waiting) why = "next step waits: " + c.waiting;
      else if (c.next_step) why = "next step (+" + c.spec.step + "%) at " + new Date(c.next_step).toLocaleTimeString();
      else why = "weight fixed by its labels";
      (c.sides || []).forEach((sd, i) => {
        rows.push(el("tr", { class: "canary-" + c.state, "data-service": c.service, "data-side": sd.side },
          el("td", { class: "mono", text: i ? "" : c.service }),
          el("td", { class: "mono", text: sd.side + " · " + (sd.versions || []).join(", ") }),
          el("td", null, i ? "" : el("span", { class: "state " + c.state, text: c.state.replace("_", " ") })),
          el("td", { class: "num", text: sd.side === "canary" ? c.weight + "%" : (100 - c.weight) + "%" }),
          el("td", { class: "num", text: sd.requests ? sd.share.toFixed(1) + "%" : "–" }),
          el("td", { class: "num", text: fmt(sd.requests) }),
          el("td", { class: "num", text: sd.requests ? sd.error_rate.toFixed(1) + "%" : "–" }),
          el("td", { class: "num", text: sd.requests ? fmt(sd.p99_ms) + " ms" : "–" }),
          el("td", { class: "why", text: i ? "" : why })));
      });
    });
    fill($("canaries").tBodies[0], rows, o.containers.enabled ? "no service runs a canary release" : "discovery (the docker app) is not configured", 9);
    setText("canaries-note", cs.length ? "answers in each release's sliding window (limits: max_error_rate, max_p99 on the canary's side)" : "");
  }

  function renderEvents(o) {
    const rows = o.events.map((e) => el("tr", { class: e.decision === "deny" ? "denied" : "" },
      el("td", { class: "mono", text: new Date(e.time).toLocaleTimeString() }),
      el("td", null, el("span", { class: "state " + e.decision, text: e.decision })),
      el("td", { class: "num", text: String(e.status) }),
      el("td", { class: "mono", text: e.method + " " + e.host + e.path + (e.route ? "  [" + e.route + "]" : "") }),
      el("td", { class: "mono", text: e.subject || "" }),
      el("td", { text: e.reason || "" }),
      el("td", { class: "num", text: fmt(e.duration_ms) })));
    fill($("events").tBodies[0], rows, o.events_enabled ? "no events yet" : "audit is not compiled in", 7);
    setText("events-note", o.events_enabled ? "newest first, last " + o.events.length : "");
  }

  function renderDuties(o) {
    const c = o.counters;
    setText("jwt-valid", fmt(c.jwt.valid));
    setText("jwt-rejected", fmt(c.jwt.rejected));
    setText("jwt-hitrate", pct(c.jwt.cache_hit_rate));
    const reasons = Object.keys(c.jwt.results).filter((k) => !k.startsWith("valid") && c.jwt.results[k] > 0).sort()
      .map((k) => k + " " + fmt(c.jwt.results[k])).join(" · ");
    setText("jwt-reasons", reasons);
    setText("rbac-allow", fmt(c.rbac.allow || 0));
    setText("rbac-role", fmt(c.rbac.deny_role || 0));
    setText("rbac-scope", fmt(c.rbac.deny_scope || 0));
    setText("rbac-unauth", fmt(c.rbac.unauthenticated || 0));
    setText("rl-recent", fmt(o.rate_limited_recent));
    setText("perm-hitrate", pct(c.permission.cache_hit_rate));
    setText("perm-stale", fmt(c.permission.stale_serves));
    setText("perm-errors", fmt(c.permission.service_errors));
    setText("perm-deny", fmt(c.permission.denied + c.permission.unavailable) +
      (c.permission.would_deny ? " (dry run: " + fmt(c.permission.would_deny) + " would be)" : ""));
    const rows = c.audit.sinks.map((s) => el("tr", null,
      el("td", { class: "mono", text: s.name }), el("td", { text: s.type }),
      el("td", { class: "num", text: fmt(s.queue_depth) }), el("td", { class: "num", text: fmt(s.enqueued) }),
      el("td", { class: "num", text: fmt(s.sent) }), el("td", { class: "num", text: fmt(s.retried) }),
      el("td", { class: "num", text: fmt(s.spooled) }), el("td", { class: "num", text: fmt(s.dropped) }),
      el("td", { class: "num", text: s.backlog_age_seconds > 0 ? s.backlog_age_seconds.toFixed(1) + " s" : "–" }),
      el("td", { class: "num", text: fmtBytes(s.spool_bytes) })));
    fill($("sinks").tBodies[0], rows, "no audit sinks", 10);
  }

  function renderCards(o) {
    const c = o.counters;
    const now = new Date(o.time).getTime();
    if (last && now > last.t) {
      const dt = (now - last.t) / 1000;
      push("requests", Math.max(0, (c.requests - last.requests) / dt));
      push("denials", Math.max(0, (c.denials - last.denials) / dt));
    } else if (!last) {
      push("requests", 0); push("denials", 0);
    }
    push("backlog", c.audit.backlog);
    last = { t: now, requests: c.requests, denials: c.denials };
    setText("stat-requests-rate", fmt(series.requests[series.requests.length - 1]));
    setText("stat-denials-rate", fmt(series.denials[series.denials.length - 1]));
    setText("stat-backlog", fmt(c.audit.backlog));
    setText("stat-requests-total", fmt(c.requests));
    setText("stat-requests-source", "(" + c.requests_source + ")");
    setText("stat-denials-total", fmt(c.denials));
    setText("stat-would-deny", c.would_deny ? " · dry run: " + fmt(c.would_deny) + " would be denied" : "");
    setText("stat-audit-sent", fmt(c.audit.sent));
    setText("stat-audit-spooled", fmt(c.audit.spooled));
    setText("stat-audit-dropped", fmt(c.audit.dropped));
    spark("spark-requests", series.requests, "requests per second");
    spark("spark-denials", series.denials, "denials per second");
    spark("spark-backlog", series.backlog, "audit events queued");
  }

  function applyFilter() {
    const q = $("search").value.trim().toLowerCase();
    let shown = 0, total = 0;
    for (const id of ["routes", "containers", "canaries", "events", "sinks", "quota-top", "quota-near"]) {
      for (const tr of $(id).tBodies[0].rows) {
        if (tr.classList.contains("empty")) continue;
        total++;
        const hit = !q || (tr.textContent + " " + (tr.dataset.search || "")).toLowerCase().includes(q);
        tr.classList.toggle("hidden-by-filter", !hit);
        if (hit) shown++;
      }
    }
    setText("search-count", q ? shown + " of " + total + " rows" : "");
  }

  function render(o) {
    data = o;
    renderCards(o);
    renderDuties(o);
    renderContainers(o);
    renderFastPath(o);
    renderSessions(o);
    renderQuota(o);
    renderOpenAPI(o);
    renderCanaries(o);
    renderRoutes(o);
    renderEvents(o);
    applyFilter();
    setText("updated", "updated " + new Date(o.time).toLocaleTimeString());
  }

  async function tick() {
    timer = null;
    try {
      const resp = await fetch("api/overview?n=50", { cache: "no-store", credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const o = await resp.json();
      if (o.refresh_ms > 0) refreshMS = o.refresh_ms;
      $("error").hidden = true;
      render(o);
    } catch (err) {
      const e = $("error");
      e.textContent = "Could not load the gateway's state: " + err.message + " (retrying)";
      e.hidden = false;
    }
    if (!paused) timer = setTimeout(tick, refreshMS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    // "/" focuses the filter. Some input paths (e.g. synthetic key events)
    // still deliver the "/" character after keydown was cancelled, so a "/"
    // that arrives right after that focus is dropped.
    let slashFocus = false;
    $("search").addEventListener("input", (ev) => {
      if (slashFocus && ev.target.value.startsWith("/")) ev.target.value = ev.target.value.slice(1);
      slashFocus = false;
      applyFilter();
    });
    $("search").addEventListener("keydown", (ev) => {
      slashFocus = false;
      if (ev.key === "Escape") { ev.target.value = ""; applyFilter(); }
    });
    document.addEventListener("keydown", (ev) => {
      const a = document.activeElement;
      const typing = a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA");
      if (ev.key === "/" && !typing && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
        ev.preventDefault();
        $("search").focus();
        slashFocus = true;
      }
    });
    $("pause").addEventListener("click", () => {
      paused = !paused;
      $("pause").setAttribute("aria-pressed", String(paused));
      $("pause").textContent = paused ? "Resume" : "Pause";
      if (!paused && !timer) tick();
      else if (paused && timer) { clearTimeout(timer); timer = null; }
    });
    tick();
  });
})();
