// rigger's status page: renders the board serve sends on /events. Every
// value is put in the page as text (textContent, attributes), never as
// HTML: what a cluster.yml, a node or an error says cannot become markup.
"use strict";

(function () {
  const main = document.getElementById("clusters");
  const live = document.getElementById("live");
  const summary = document.getElementById("summary");
  // The <details> the reader opened, by key, kept open across updates.
  const opened = new Set();

  // el makes an element: attrs are set as attributes (class via "class"),
  // children are nodes or strings (text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function when(t) {
    if (!t || t.startsWith("0001-")) return null;
    const d = new Date(t);
    if (isNaN(d)) return null;
    return d;
  }

  // ago is t relative to now ("5 min ago", "in 3 days").
  function ago(t) {
    const d = when(t);
    if (!d) return "—";
    const s = Math.round((d.getTime() - Date.now()) / 1000);
    const a = Math.abs(s);
    if (a < 5) return "just now";
    let n, u;
    if (a < 60) { n = a; u = "s"; }
    else if (a < 3600) { n = Math.round(a / 60); u = "min"; }
    else if (a < 86400) { n = Math.round(a / 3600); u = "h"; }
    else { n = Math.round(a / 86400); u = n === 1 ? "day" : "days"; }
    return s < 0 ? n + " " + u + " ago" : "in " + n + " " + u;
  }

  function time(t) {
    const d = when(t);
    if (!d) return el("span", { class: "muted" }, "—");
    return el("time", { datetime: t, title: d.toLocaleString() }, ago(t));
  }

  function short(rev) { return rev ? rev.slice(0, 12) : ""; }

  function yesNo(ok, yes, no) {
    return el("span", { class: ok ? "yes" : "no" }, ok ? (yes || "yes") : (no || "no"));
  }

  function details(key, title, ...body) {
    const d = el("details", { "data-key": key }, el("summary", {}, title), ...body);
    if (opened.has(key)) d.open = true;
    d.addEventListener("toggle", () => { d.open ? opened.add(key) : opened.delete(key); });
    return d;
  }

  // table makes a table; each row's cells carry their column's label,
  // which a phone shows beside the value.
  function table(cols, rows) {
    return el("table", {},
      el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)))),
      el("tbody", {}, rows.map((r) => el("tr", {}, r.map((v, i) => el("td", { "data-label": cols[i] }, v))))));
  }

  function condClass(c) {
    if (c.type === "Ready") return c.status === "True" ? "ok" : c.status === "False" ? "bad" : "warn";
    if (c.type === "Stalled") return c.status === "True" ? "bad" : "neutral";
    if (c.type === "Reconciling") return c.status === "True" ? "warn" : "neutral";
    return "";
  }

  function section(title, ...body) {
    return [el("h3", {}, title), ...body];
  }

  function conditions(f, running) {
    const badges = el("div", { class: "badges" });
    const msgs = el("div", {});
    for (const c of f.conditions || []) {
      badges.append(el("span", { class: "badge " + condClass(c), "data-condition": c.type, "data-status": c.status,
        title: (c.reason || "") + (c.lastTransitionTime ? " since " + new Date(c.lastTransitionTime).toLocaleString() : "") },
        c.type + " " + c.status));
      if (c.status === "True" && c.type !== "Ready" || c.type === "Ready" && c.status !== "True") {
        if (c.reason || c.message) {
          msgs.append(el("p", { class: "message", "data-message": c.type },
            el("strong", {}, c.type + ": " + (c.reason || "")), c.message ? " — " + c.message : ""));
        }
      }
    }
    if (f.suspended) badges.append(el("span", { class: "badge warn" }, "suspended"));
    if (running) badges.append(el("span", { class: "badge warn", "data-running": "" }, "reconciling now (" + running.trigger + ")"));
    return [badges, msgs];
  }

  function facts(c) {
    const f = c.status || {};
    const st = f.status || {};
    const dl = el("dl", { class: "facts" });
    const add = (k, ...v) => dl.append(el("dt", {}, k), el("dd", {}, ...v));
    add("observed revision", f.observedRevision
      ? el("code", { "data-field": "revision", title: f.observedRevision }, short(f.observedRevision)) : el("span", { class: "muted" }, "none yet"));
    if (f.source) add("source", el("span", { class: "mono" }, (f.source.branch || "") + ":" + (f.source.path || c.path)));
    if (f.lastReconcile) {
      const r = f.lastReconcile;
      add("last reconcile", time(r.finishedAt), " · " + r.trigger + " · " + r.duration + " · " + r.steps + " step(s)" +
        (r.failed ? ", " + r.failed + " failed" : ""));
    }
    if (st.observed_at) add("observed", time(st.observed_at));
    if (st.pending_steps !== undefined) add("pending steps", st.pending_steps === 0 ? el("span", { class: "yes" }, "0 (in sync)") : String(st.pending_steps));
    const k = st.kubernetes;
    if (k && k.running) {
      add("Kubernetes", k.running.map((v) => v.version + (k.mixed ? " (" + v.nodes.join(", ") + ")" : "")).join(" · ") +
        (k.mixed ? " — mixed: an upgrade goes on" : ""));
    }
    if (st.kubernetes_error) add("Kubernetes API", el("span", { class: "no" }, st.kubernetes_error));
    if (c.running) {
      add("running now", c.running.trigger + " of ", el("code", { title: c.running.revision }, short(c.running.revision)), " since ", time(c.running.startedAt));
    }
    return dl;
  }

  function problems(st) {
    const ps = (st.problems || []).filter((p) => p.level === "fail" || p.level === "warn");
    if (!ps.length) return [];
    return section("Failing checks (rigger doctor)", ps.map((p) =>
      el("div", { class: "problem" + (p.level === "warn" ? " warn" : ""), "data-check": p.check },
        el("div", {}, el("strong", {}, (p.node ? p.node + ": " : "") + p.check), " — " + p.level),
        p.found ? el("div", {}, "found: " + p.found) : null,
        p.expected ? el("div", { class: "muted" }, "expected: " + p.expected) : null,
        p.fix ? el("div", { class: "fix" }, el("strong", {}, "fix: "), p.fix) : null)));
  }

  function nodes(st) {
    const ns = st.nodes || [];
    if (!ns.length) return [];
    const rows = ns.map((n) => {
      const cs = n.containers || [];
      const inSync = cs.filter((c) => c.in_sync).length;
      const restarting = cs.filter((c) => c.state === "restarting" || c.restarts > 0 || c.started_since_last_apply)
        .map((c) => c.name + (c.restarts ? " (" + c.restarts + "×)" : c.state === "restarting" ? " (restarting)" : " (started again)"));
      const kn = n.kubernetes_node;
      let ready = el("span", { class: "muted" }, "no Node");
      if (kn) {
        ready = el("span", { class: kn.ready === "True" ? "yes" : "no", title: [kn.ready_reason, kn.ready_message].filter(Boolean).join(": ") },
          kn.ready + (kn.ready_reason ? " (" + kn.ready_reason + ")" : ""));
      }
      return [
        el("span", {}, el("strong", { class: "mono" }, n.address), n.hostname ? " " + n.hostname : "", n.removed ? " (removed from cluster.yml)" : ""),
        (n.roles || []).join(", "),
        el("span", {}, yesNo(n.reachable), n.error ? el("div", { class: "no message" }, n.error) : null),
        cs.length ? yesNo(inSync === cs.length, inSync + "/" + cs.length, inSync + "/" + cs.length) : el("span", { class: "muted" }, "—"),
        restarting.length ? el("span", { class: "no" }, restarting.join(", ")) : el("span", { class: "muted" }, "none"),
        ready,
        n.certs_expire ? time(n.certs_expire) : el("span", { class: "muted" }, "—"),
      ];
    });
    const out = section("Nodes", table(["node", "roles", "reachable", "containers in sync", "restarting", "Node Ready", "certificates expire"], rows));
    const extra = [];
    if ((st.missing_nodes || []).length) extra.push(el("p", {}, "No Kubernetes Node yet: " + st.missing_nodes.join(", ")));
    if ((st.stale_nodes || []).length) extra.push(el("p", {}, "Stale Nodes (no node of cluster.yml owns them): " + st.stale_nodes.map((s) => s.name || JSON.stringify(s)).join(", ")));
    return out.concat(extra);
  }

  function etcd(f, st) {
    const e = st.etcd;
    const snap = f.snapshots;
    if (!e && !snap) return [];
    const out = [];
    if (e) {
      const rows = Object.keys(e.health || {}).sort().map((addr) => [el("span", { class: "mono" }, addr), yesNo(e.health[addr] === "healthy", "healthy", e.health[addr])]);
      if (rows.length) out.push(table(["etcd node", "health"], rows));
      if ((e.members || []).length) {
        out.push(el("p", {}, "Members: ", e.members.map((m) => (m.name || "(not started)") + (m.is_learner ? " (learner)" : "") + (m.healthy ? "" : " ✗")).join(", ")));
      }
      if (e.error) out.push(el("p", { class: "no" }, e.error));
    }
    if (snap) {
      const dl = el("dl", { class: "facts" });
      const add = (k, ...v) => dl.append(el("dt", {}, k), el("dd", {}, ...v));
      if (snap.last) add("last snapshot", el("span", { class: "mono" }, snap.last.name), " · ", time(snap.last.taken), snap.last.size ? " · " + bytes(snap.last.size) : "");
      else add("last snapshot", el("span", { class: "no" }, "none"));
      if (snap.next) add("next", time(snap.next));
      if (snap.error) add("error", el("span", { class: "no message" }, snap.error));
      if ((snap.notInS3 || []).length) add("not in S3 yet", snap.notInS3.join(", "));
      out.push(dl);
    }
    if (f.restore) out.push(el("p", {}, "Restore " + f.restore.id + " of " + f.restore.snapshot + " ", time(f.restore.at), f.restore.error ? el("span", { class: "no" }, ": " + f.restore.error) : ": done"));
    return section("etcd", out);
  }

  function bytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
    return (n / (1 << 20)).toFixed(1) + " MiB";
  }

  function certificates(c, st) {
    const cs = Object.entries(st.certificates || {}).sort((a, b) => new Date(a[1]) - new Date(b[1]));
    if (!cs.length) return [];
    const first = cs[0];
    const soon = when(first[1]) && when(first[1]).getTime() - Date.now() < 30 * 86400 * 1000;
    return section("Certificates",
      el("p", {}, "First to expire: ", el("span", { class: "mono" }, first[0]), " ", el("span", { class: soon ? "no" : "" }, time(first[1]))),
      details(c.path + "#certs", "all " + cs.length + " certificates", table(["certificate", "expires"],
        cs.map(([name, t]) => [el("span", { class: "mono" }, name), el("span", {}, time(t), " (" + (when(t) ? when(t).toISOString().slice(0, 10) : "") + ")")]))));
  }

  function addons(st) {
    const as = st.addons || [];
    if (!as.length && !st.addons_error) return [];
    return section("Add-ons",
      st.addons_error ? el("p", { class: "no message" }, st.addons_error) : null,
      as.length ? table(["add-on", "ready", "objects", "pending changes", "not ready"], as.map((a) => [
        el("span", {}, a.name, a.removed ? " (removed from cluster.yml)" : ""),
        a.error ? el("span", { class: "no" }, a.error) : yesNo(a.ready),
        String(a.objects),
        String(a.pending || 0),
        (a.not_ready || []).join("; ") || el("span", { class: "muted" }, "—"),
      ])) : null);
  }

  function agents(f) {
    const ts = f.agentTunnels || [];
    const pending = f.pendingAgents || [];
    if (!ts.length && !pending.length) return [];
    return section("Agent tunnels",
      ts.length ? table(["node", "connected", "from", "last seen"], ts.map((t) => [
        el("span", { class: "mono" }, t.node), yesNo(t.connected), t.hostname || "—", t.last_seen ? time(t.last_seen) : "—"])) : null,
      pending.length ? el("div", {}, el("p", {}, "Pending registrations (not in cluster.yml with transport: agent):"),
        el("ul", { class: "plain", "data-field": "pending-agents" }, pending.map((p) => el("li", { class: "mono" }, p)))) : null);
  }

  function drift(c, f) {
    const ds = f.drift || [];
    if (!ds.length) return [];
    return section("Drift repaired", details(c.path + "#drift", ds.length + " change(s) made by hand, repaired",
      table(["when", "node", "change", "error"], ds.map((d) => [time(d.repairedAt), el("span", { class: "mono" }, d.node),
        d.action + " " + d.component + " (" + d.reason + ")", d.error ? el("span", { class: "no" }, d.error) : "—"]))));
  }

  function reconciles(c) {
    const rs = c.reconciles || [];
    if (!rs.length) return [];
    return section("Last reconciles", el("ul", { class: "plain", "data-field": "reconciles" }, rs.map((r, i) => {
      const secs = when(r.finishedAt) && when(r.startedAt) ? ((when(r.finishedAt) - when(r.startedAt)) / 1000).toFixed(1) + " s" : "";
      const head = el("span", {}, yesNo(!r.error, "✓", "✗"), " ", time(r.finishedAt), " · " + r.trigger + " · ",
        el("code", { title: r.revision }, short(r.revision)), " · " + secs + " · " + r.steps + " step(s)" + (r.failed ? ", " + r.failed + " failed" : ""));
      const body = [];
      if (r.error) body.push(el("pre", { class: "no", "data-field": "error" }, r.error));
      if ((r.plan || []).length) body.push(el("pre", { "data-field": "plan" }, r.plan.join("\n")));
      else body.push(el("p", { class: "muted" }, r.error ? "no plan was computed" : "the plan was empty: nothing to change"));
      return el("li", {}, details(c.path + "#r" + r.finishedAt, head, body));
    })));
  }

  // held says which replica of serve reconciles a cluster that this one
  // does not (several replicas share the clusters), and where its status
  // comes from.
  function held(c, f) {
    if (!c.elsewhere) return f.replica ? el("p", { class: "muted", "data-field": "replica" }, "reconciled by this replica, " + f.replica) : null;
    return el("p", { class: "message", "data-field": "held-by", "data-held-by": c.heldBy || "" },
      el("strong", {}, c.heldBy ? "reconciled by replica " + c.heldBy : "no replica holds this cluster's Lease at the moment (handed over, or taken over)"),
      " — its status as that replica committed it to status.yml, at this replica's last fetch; its reconciles are on that replica's page");
  }

  function cluster(c) {
    const f = c.status || {};
    const st = f.status || {};
    return el("section", { class: "cluster", "data-path": c.path, "data-cluster": f.cluster || "" },
      el("h2", {}, f.cluster || c.path),
      el("div", { class: "path muted mono" }, c.path),
      held(c, f),
      conditions(f, c.running),
      facts(c),
      problems(st),
      nodes(st),
      etcd(f, st),
      certificates(c, st),
      addons(st),
      agents(f),
      drift(c, f),
      reconciles(c));
  }

  // The board as the events told it, by path: the first event of a
  // stream has every cluster (full), the next ones what changed.
  const board = new Map();

  function update(snap) {
    if (snap.full) board.clear();
    for (const c of snap.clusters || []) board.set(c.path, c);
    for (const p of snap.removed || []) board.delete(p);
    render([...board.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)));
  }

  function render(cs) {
    const ready = cs.filter((c) => ((c.status || {}).conditions || []).some((x) => x.type === "Ready" && x.status === "True")).length;
    summary.textContent = cs.length + " cluster(s), " + ready + " ready";
    if (!cs.length) {
      main.replaceChildren(el("p", { class: "empty" }, "No cluster yet: serve has found no cluster.yml, or has not fetched the repository."));
      return;
    }
    main.replaceChildren(...cs.map(cluster));
  }

  function connect() {
    const es = new EventSource("events");
    es.addEventListener("open", () => { live.className = "live on"; live.textContent = "live"; live.dataset.state = "live"; });
    es.addEventListener("error", () => {
      live.className = "live off"; live.textContent = "reconnecting…"; live.dataset.state = "reconnecting";
      // An EventSource does not say why it failed: ask once whether the
      // page is refused, and say what to do instead of retrying for ever.
      fetch("api/clusters", { credentials: "same-origin" }).then((r) => {
        if (r.status === 401 || r.status === 403) {
          es.close();
          live.textContent = "signed out"; live.dataset.state = "refused";
          summary.textContent = "serve refuses this page now: open it again with ?token=<token>, or with a client certificate";
        }
      }).catch(() => {});
    });
    es.addEventListener("board", (ev) => {
      try { update(JSON.parse(ev.data)); } catch (err) { summary.textContent = "cannot show the board: " + err; }
    });
  }
  connect();
  // Relative times age: refresh them each half minute without a new event.
  setInterval(() => {
    for (const t of document.querySelectorAll("time[datetime]")) t.textContent = ago(t.getAttribute("datetime"));
  }, 30000);
})();
