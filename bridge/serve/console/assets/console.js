// The designers' console: a page per hash route (#/upstreams, #/catalog, #/tool/<id>, #/surface),
// each read from the bridge's JSON API with the caller's own token. Text from the catalog is only
// ever set as text (never parsed as HTML), and the page loads nothing from anywhere else.
'use strict';

(() => {
  const ROOT = location.pathname.replace(/\/ui\/?$/, '');
  const TOKEN_KEY = 'a2t-bridge-console-token';
  const main = document.getElementById('main');
  const statusRegion = document.getElementById('status');
  let session = null;  // GET /ui/api/session of the current token
  let renderCount = 0;

  // ------------------------------------------------------------------ helpers

  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'class') el.className = value;
      else if (key === 'text') el.textContent = value;
      else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
      else if (key === 'dataset') Object.assign(el.dataset, value);
      else el.setAttribute(key, value === true ? '' : String(value));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }

  // replaceChildren, leaving out the null and false of conditional parts
  function fill(el, ...kids) {
    el.replaceChildren(...kids.flat(Infinity).filter((kid) => kid != null && kid !== false));
  }

  function say(text) {
    statusRegion.textContent = '';
    setTimeout(() => { statusRegion.textContent = text; }, 30);
  }

  function badge(text, kind) {
    return h('span', { class: `badge ${kind || text}`, text });
  }

  function pretty(value) {
    return JSON.stringify(value, null, 2);
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }

  function authHeaders() {
    const t = token();
    return t ? { Authorization: `Bearer ${t}` } : {};
  }

  class NeedsToken extends Error {}

  // Every request of the console: the caller's token, JSON back. 401 shows the sign-in form.
  async function api(path, options = {}) {
    const response = await fetch(ROOT + path, {
      ...options,
      headers: { Accept: 'application/json', ...authHeaders(), ...(options.headers || {}) },
      cache: 'no-store',
    });
    if (response.status === 401) throw new NeedsToken();
    let body = null;
    const type = response.headers.get('content-type') || '';
    if (type.includes('json')) body = await response.json();
    else body = await response.text();
    return { status: response.status, ok: response.ok, body };
  }

  function errorNotice(body, status) {
    const error = (body && body.error) || {};
    return h('div', { class: 'notice bad', role: 'alert' },
      h('strong', { text: `${error.error_class || 'error'} (HTTP ${status})` }), ': ',
      error.message || String(body),
      error.recoverability ? h('div', { text: `Recoverability: ${error.recoverability}` }) : null);
  }

  function show(title, ...kids) {
    const heading = h('h1', { tabindex: '-1', text: title });
    fill(main, heading, kids);
    document.title = `${title} · a2t-bridge console`;
    heading.focus({ preventScroll: false });
    renderCount += 1;
    main.dataset.rendered = String(renderCount);
    main.dataset.route = decodeURI(location.hash);
  }

  function table(caption, headers, rows, rowClass) {
    return h('div', { class: 'table-wrap' },
      h('table', {},
        h('caption', { text: caption }),
        h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', {}, rows.map((cells, i) => h('tr', { class: rowClass ? rowClass(i) : null },
          cells.map((c) => h('td', {}, c)))))));
  }

  function toolLink(row) {
    return h('a', { href: `#/tool/${encodeURIComponent(row.tool_id)}`, class: 'name', text: row.name });
  }

  async function copy(text, what) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      const area = h('textarea', { 'aria-hidden': 'true' });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand('copy');
      area.remove();
    }
    say(`${what} copied`);
  }

  // ------------------------------------------------------------------ sign-in

  function signIn(message) {
    const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false',
      required: true, 'aria-describedby': 'token-help' });
    const form = h('form', {
      onsubmit: (event) => {
        event.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        session = null;
        route();
      },
    },
    h('div', { class: 'field' },
      h('label', { for: 'token', text: 'Bearer token' }),
      input,
      h('small', { id: 'token-help', text: 'A static token of server.tokens or an OAuth access token. '
        + 'It is kept in this tab only (sessionStorage) and sent to this bridge alone.' })),
    h('button', { class: 'primary', type: 'submit', text: 'Sign in' }));
    show('Sign in', message ? h('p', { class: 'notice warn', text: message }) : null, form);
    input.focus();
  }

  function renderWho() {
    const who = document.getElementById('who');
    if (!session) { who.replaceChildren(); return; }
    fill(who,
      h('span', {}, 'Surface ', h('strong', { text: session.surface }),
        session.caller ? ` · ${session.caller}` : ''),
      h('button', { type: 'button', text: token() ? 'Change token' : 'Sign in',
        onclick: () => signIn() }),
      token() ? h('button', { type: 'button', text: 'Sign out', onclick: () => {
        sessionStorage.removeItem(TOKEN_KEY); session = null; renderWho(); signIn('Signed out.');
      } }) : null);
  }

  async function ensureSession() {
    if (session) return session;
    const answer = await api('/ui/api/session');
    if (!answer.ok) throw Object.assign(new Error('session'), { answer });
    session = answer.body;
    renderWho();
    return session;
  }

  // ------------------------------------------------------------------ upstreams

  async function upstreamsPage() {
    const answer = await api('/ui/api/upstreams');
    if (!answer.ok) return show('Upstreams', errorNotice(answer.body, answer.status));
    const headers = ['Upstream', 'Kind', 'State', 'Tools on your surface', 'Last listing',
      'Calls on your surface', 'Errors', 'Reason'];
    const rows = answer.body.items.map((u) => {
      const cells = [
        h('a', { href: `#/catalog?upstream=${encodeURIComponent(u.name)}`, text: u.name }),
        u.kind, badge(u.state), String(u.tools), u.last_listing || '—'];
      cells.push(String(u.calls), String(u.errors));
      cells.push(u.reason ? [u.reason, u.next_retry_in != null ? ` (retry in ${u.next_retry_in} s)` : ''] : '—');
      return cells;
    });
    show('Upstreams', table(`${rows.length} upstreams`, headers, rows));
  }

  // ------------------------------------------------------------------ catalog

  const FILTERS = ['q', 'upstream', 'kind', 'tag', 'read_only', 'destructive', 'placement', 'offset'];

  function select(id, label, options, value) {
    return h('div', { class: 'field' },
      h('label', { for: id, text: label }),
      h('select', { id, name: id },
        options.map(([v, text]) => h('option', { value: v, selected: v === (value || '') }, text))));
  }

  async function catalogPage(params) {
    const s = await ensureSession();
    const facets = s.facets;
    const any = [['', 'Any']];
    const q = h('input', { id: 'q', name: 'q', type: 'search', value: params.get('q') || '',
      placeholder: 'keywords, or select:name', 'aria-describedby': 'q-help' });
    const form = h('form', { role: 'search', 'aria-label': 'Search and filter the catalog', class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        const data = new URLSearchParams();
        for (const [key, value] of new FormData(form)) if (value) data.set(key, value);
        location.hash = `#/catalog?${data}`;
      },
    },
    h('div', { class: 'field wide' },
      h('label', { for: 'q', text: 'Search tools' }),
      h('div', { class: 'searchrow' }, q, h('button', { class: 'primary', type: 'submit', text: 'Search' })),
      h('small', { id: 'q-help', text: 'Ranked by the same tool search as GET /search; leave empty to list by name.' })),
    select('upstream', 'Upstream', any.concat(facets.upstreams.map(([n, c]) => [n, `${n} (${c})`])), params.get('upstream')),
    select('kind', 'Kind', any.concat(facets.kinds.map(([n, c]) => [n, `${n} (${c})`])), params.get('kind')),
    select('tag', 'Tag', any.concat(facets.tags.map(([n, c]) => [n, `${n} (${c})`])), params.get('tag')),
    select('read_only', 'Read-only', any.concat([['true', 'Read-only'], ['false', 'Not read-only']]), params.get('read_only')),
    select('destructive', 'Destructive', any.concat([['true', 'Destructive'], ['false', 'Not destructive']]), params.get('destructive')),
    select('placement', 'On your surface', any.concat([['loaded', 'Loaded'], ['deferred', 'Deferred'],
      ['blocked', 'Blocked']]), params.get('placement')));
    for (const el of form.querySelectorAll('select')) {
      el.addEventListener('change', () => form.requestSubmit());
    }
    const query = new URLSearchParams();
    for (const key of FILTERS) if (params.get(key)) query.set(key, params.get(key));
    const answer = await api(`/ui/api/catalog?${query}`);
    if (!answer.ok) return show('Catalog', form, errorNotice(answer.body, answer.status));
    const page = answer.body;
    const summary = page.total === 0 ? 'No tool matches.'
      : `${page.ranked ? 'Best matches' : 'Tools'} ${page.offset + 1}–${page.offset + page.items.length} of ${page.total}`;
    const list = h('ol', { class: 'results', start: page.offset + 1, 'aria-label': 'Tools' },
      page.items.map((row) => h('li', {},
        toolLink(row),
        row.title ? h('span', { class: 'muted', text: ` — ${row.title}` }) : null,
        h('div', { class: 'meta' },
          badge(row.placement), row.reason ? badge(row.reason, 'blocked') : null,
          h('span', { class: 'badge', text: row.namespace }), h('span', { class: 'badge', text: row.tool_kind }),
          row.read_only ? badge('read-only', 'ok') : null, row.destructive ? badge('destructive') : null,
          row.tags.map((t) => h('span', { class: 'badge', text: `#${t}` }))),
        h('p', { text: row.description }),
        row.alternatives && row.alternatives.length ? h('p', {}, 'Also from: ',
          row.alternatives.map((a, i) => [i ? ', ' : '', h('a', { href: `#/tool/${encodeURIComponent(a.tool_id)}`, text: a.name })]))
          : null)));
    const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' },
      h('button', { type: 'button', text: 'Previous page', disabled: page.offset === 0,
        onclick: () => move(Math.max(0, page.offset - page.limit)) }),
      h('button', { type: 'button', text: 'Next page', disabled: page.next_offset == null,
        onclick: () => move(page.next_offset) }));
    function move(offset) {
      const next = new URLSearchParams(query);
      if (offset) next.set('offset', String(offset)); else next.delete('offset');
      location.hash = `#/catalog?${next}`;
    }
    show('Catalog', form,
      page.hint ? h('p', { class: 'notice warn', text: page.hint }) : null,
      h('p', { id: 'catalog-count', role: 'status', text: summary }), list, pager);
    performance.mark('catalog-rendered');
    if (params.get('q')) q.focus();
  }

  // ------------------------------------------------------------------ tool page

  function paramsTable(caption, rows) {
    if (!rows.length) return h('p', { class: 'muted', text: `${caption}: none declared.` });
    return table(caption, ['Name', 'Type', 'Required', 'Description', 'Constraints'],
      rows.map((r) => [h('code', { text: r.name }), r.type || '—', r.required ? 'yes' : 'no',
        r.description || '—', Object.keys(r.constraints || {}).length ? h('code', { text: JSON.stringify(r.constraints) }) : '—']));
  }

  function mappingsList(mappings) {
    if (!mappings.length) return h('p', { class: 'muted', text: 'No external mapping.' });
    return mappings.map((m, i) => h('div', { class: 'table-wrap' }, table(`Native identity ${i + 1}`, ['Key', 'Value'],
      Object.entries(m).map(([k, v]) => [h('code', { text: k }), h('code', { class: 'native', text: typeof v === 'string' ? v : JSON.stringify(v) })]))));
  }

  function safetyFacts(safety) {
    const sources = safety.sources || {};
    const facts = ['read_only', 'destructive', 'idempotent', 'open_world', 'reversible', 'billable', 'requires_user_interaction'];
    return h('dl', { class: 'facts' }, facts.filter((f) => f in safety).map((f) => [
      h('dt', { text: f.replace(/_/g, ' ') }),
      h('dd', {}, String(safety[f]), h('span', { class: 'muted', text: ` (${sources[f] || 'default'})` }))]));
  }

  async function toolPage(ref, params) {
    const answer = await api(`/ui/api/tools/${encodeURIComponent(ref)}`);
    if (!answer.ok) return show('Tool', errorNotice(answer.body, answer.status));
    const t = answer.body;
    const d = t.declaration;
    const place = t.placement;
    const sections = [['about', 'About'], ['schema', 'Inputs and outputs'], ['native', 'Native identity'],
      ['alternatives', 'Alternatives'], ['versions', 'Versions'], ['try', 'Try it'], ['export', 'Take it away']];
    const toc = h('nav', { 'aria-label': 'Sections of this tool' }, h('ul', { class: 'toc' },
      sections.map(([id, text]) => h('li', {}, h('a', { href: `#/tool/${encodeURIComponent(ref)}`, dataset: { section: id },
        onclick: (event) => { event.preventDefault(); const el = document.getElementById(id); el.scrollIntoView(); el.focus(); },
        text })))));
    const placement = h('div', { id: 'placement', class: `notice ${place.state === 'blocked' ? 'bad' : 'ok'}` },
      'On your surface: ', badge(place.state),
      place.reason ? [' — reason: ', h('strong', { class: 'reason', text: place.reason })] : null,
      place.detail ? h('div', { text: place.detail }) : null);
    const about = h('section', { id: 'about', tabindex: '-1', 'aria-labelledby': 'about-h' },
      h('h2', { id: 'about-h', text: 'About' }),
      d.title ? h('p', {}, h('strong', { text: d.title })) : null,
      h('p', { class: 'description', text: d.description || '(no description)' }),
      h('dl', { class: 'facts' },
        h('dt', { text: 'Tool id' }), h('dd', {}, h('code', { text: d.tool_id })),
        h('dt', { text: 'Upstream' }), h('dd', { text: `${d.upstream} (${d.upstream_kind})` }),
        h('dt', { text: 'Kind' }), h('dd', { text: d.tool_kind }),
        h('dt', { text: 'Version' }), h('dd', { text: String(d.version) }),
        h('dt', { text: 'Lifecycle' }), h('dd', { text: `${d.lifecycle}, ${d.loading_state}${d.loading_reason ? ` (${d.loading_reason})` : ''}` }),
        d.tags && d.tags.length ? [h('dt', { text: 'Tags' }), h('dd', { text: d.tags.join(', ') })] : null,
        d.aliases && d.aliases.length ? [h('dt', { text: 'Aliases' }), h('dd', { text: d.aliases.join(', ') })] : null),
      h('h3', { text: 'Safety hints' }), safetyFacts(d.safety || {}));
    const schema = h('section', { id: 'schema', tabindex: '-1' },
      h('h2', { text: 'Inputs and outputs' }), paramsTable('Inputs', t.inputs), paramsTable('Outputs', t.outputs),
      h('details', {}, h('summary', { text: 'JSON Schemas' }),
        h('pre', { text: pretty((d.input_contract || {}).model_input_schema || {}) }),
        h('pre', { text: pretty((d.output_contract || {}).output_schema || null) })));
    const native = h('section', { id: 'native', tabindex: '-1' }, h('h2', { text: 'Native identity' }),
      h('p', { class: 'muted', text: 'How the upstream itself names this tool.' }),
      h('dl', { class: 'facts' }, h('dt', { text: 'Native id' }), h('dd', {}, h('code', { class: 'native', text: d.native_id })),
        h('dt', { text: 'Native name' }), h('dd', {}, h('code', { text: d.native_name }))),
      mappingsList(d.external_mappings || []));
    const alternatives = h('section', { id: 'alternatives', tabindex: '-1' }, h('h2', { text: 'Alternatives' }),
      t.alternatives.length ? h('ul', {}, t.alternatives.map((a) => h('li', {}, toolLink(a), ` from ${a.namespace} (${a.upstream_kind})`)))
        : h('p', { class: 'muted', text: 'No other upstream lists this function.' }));
    const versions = versionsSection(ref, t, params);
    const tryIt = trySection(d, place);
    const exportsSection = takeAway(t.exports);
    show(d.name, placement, toc, about, schema, native, alternatives, versions, tryIt, exportsSection);
    if (params.get('from') || params.get('to')) {
      await showDiff(ref, params.get('from'), params.get('to'));
    }
  }

  function versionsSection(ref, t, params) {
    const numbers = t.versions.map((v) => String(v.version));
    const newest = numbers[0] || '1';
    const older = numbers[1] || newest;
    const from = select('diff-from', 'From version', numbers.map((n) => [n, n]), params.get('from') || older);
    const to = select('diff-to', 'To version', numbers.map((n) => [n, n]), params.get('to') || newest);
    const form = h('form', { class: 'row', 'aria-label': 'Compare two versions', onsubmit: async (event) => {
      event.preventDefault();
      await showDiff(ref, from.querySelector('select').value, to.querySelector('select').value);
    } }, from, to, h('button', { type: 'submit', text: 'Compare' }));
    return h('section', { id: 'versions', tabindex: '-1' }, h('h2', { text: 'Versions' }),
      table('Version history, newest first', ['Version', 'Class', 'Created', 'Digest'],
        t.versions.map((v) => [String(v.version), badge(v.compatibility), v.created_at, h('code', { text: v.digest.slice(0, 19) })])),
      numbers.length > 1 ? form : h('p', { class: 'muted', text: 'One version so far: nothing to compare.' }),
      h('div', { id: 'diff', 'aria-live': 'polite' }));
  }

  async function showDiff(ref, from, to) {
    const target = document.getElementById('diff');
    const query = new URLSearchParams();
    if (from) query.set('from', from);
    if (to) query.set('to', to);
    const answer = await api(`/ui/api/tools/${encodeURIComponent(ref)}/diff?${query}`);
    if (!answer.ok) { target.replaceChildren(errorNotice(answer.body, answer.status)); return; }
    const diff = answer.body;
    const verdict = diff.compatibility;
    const changed = new Map(diff.changes.map((c) => [c.where, c.effect]));
    const side = (which) => {
      const v = diff[which];
      return h('section', { 'aria-label': `Version ${v.version}` }, h('h3', {}, `Version ${v.version} `, badge(v.compatibility)),
        table(`Inputs of version ${v.version}`, ['Name', 'Type', 'Required'],
          v.inputs.map((r) => [h('code', { text: r.name }), r.type, r.required ? 'yes' : 'no']),
          (i) => changed.get(`input.${v.inputs[i].name}`) || null),
        v.outputs.length ? table(`Outputs of version ${v.version}`, ['Name', 'Type'],
          v.outputs.map((r) => [h('code', { text: r.name }), r.type]),
          (i) => changed.get(`output.${v.outputs[i].name}`) || null)
          : h('p', { class: 'muted', text: 'No declared outputs.' }),
        h('details', {}, h('summary', { text: 'Signature' }), h('pre', { text: pretty(v.signature) })));
    };
    const word = verdict === 'same' ? 'The same signature' : `${verdict[0].toUpperCase()}${verdict.slice(1)} change`;
    fill(target,
      h('div', { id: 'diff-verdict', class: `notice ${verdict === 'breaking' ? 'bad' : 'ok'}`, role: 'status' },
        h('strong', { text: word }), ` from version ${diff.from.version} to ${diff.to.version}`,
        verdict === 'breaking' ? ': a caller of the older version may not be served.' : '.'),
      diff.changes.length ? table('What changed', ['Where', 'What', 'Effect', 'Why'],
        diff.changes.map((c) => [h('code', { text: c.where }), c.what, badge(c.effect), c.why])) : null,
      h('div', { class: 'sides' }, side('from'), side('to')));
    say(`${word} from version ${diff.from.version} to ${diff.to.version}`);
    document.getElementById('versions').scrollIntoView();
  }

  // ------------------------------------------------------------------ try it

  function inputFor(name, schema, required) {
    const id = `arg-${name}`;
    const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
    const help = [schema.description, required ? 'required' : 'optional', type].filter(Boolean).join(' · ');
    let control;
    if (Array.isArray(schema.enum)) {
      control = h('select', { id, name },
        h('option', { value: '' }, required ? 'Choose…' : '(leave out)'),
        schema.enum.map((v) => h('option', { value: JSON.stringify(v) }, String(v))));
      control.dataset.kind = 'json';
    } else if (type === 'boolean') {
      control = h('select', { id, name }, h('option', { value: '' }, '(leave out)'),
        h('option', { value: 'true' }, 'true'), h('option', { value: 'false' }, 'false'));
      control.dataset.kind = 'json';
    } else if (type === 'integer' || type === 'number') {
      control = h('input', { id, name, type: 'number', step: type === 'integer' ? '1' : 'any',
        min: schema.minimum, max: schema.maximum });
      control.dataset.kind = 'number';
    } else if (type === 'string' || type === undefined && !schema.properties && !schema.items) {
      control = h('input', { id, name, type: 'text', maxlength: schema.maxLength });
      control.dataset.kind = 'string';
    } else {
      control = h('textarea', { id, name, rows: 3, spellcheck: 'false', placeholder: 'JSON' });
      control.dataset.kind = 'json';
    }
    if (schema.default !== undefined) control.placeholder = `default: ${JSON.stringify(schema.default)}`;
    control.setAttribute('aria-describedby', `${id}-help`);
    if (required) control.setAttribute('aria-required', 'true');
    return h('div', { class: 'field' }, h('label', { for: id }, name, required ? ' *' : ''),
      control, h('small', { id: `${id}-help`, text: help }));
  }

  function argumentsOf(form) {
    const out = {};
    for (const control of form.querySelectorAll('[data-kind]')) {
      const raw = control.value;
      if (raw === '') continue;
      if (control.dataset.kind === 'number') out[control.name] = Number(raw);
      else if (control.dataset.kind === 'json') {
        try { out[control.name] = JSON.parse(raw); } catch (_) {
          throw new Error(`${control.name}: not valid JSON`);
        }
      } else out[control.name] = raw;
    }
    return out;
  }

  function trySection(d, place) {
    const schema = (d.input_contract || {}).model_input_schema || {};
    const props = schema.properties || {};
    const required = new Set(schema.required || []);
    const fields = h('div', { id: 'try-fields' }, Object.entries(props).map(([n, s]) => inputFor(n, s || {}, required.has(n))));
    const raw = h('textarea', { id: 'try-json', rows: 6, spellcheck: 'false' });
    const rawBox = h('details', { id: 'try-raw' }, h('summary', { text: 'Edit the arguments as JSON instead' }),
      h('div', { class: 'field' }, h('label', { for: 'try-json', text: 'Arguments (JSON object)' }), raw));
    rawBox.addEventListener('toggle', () => {
      if (rawBox.open && !raw.value) {
        try { raw.value = pretty(argumentsOf(fields)); } catch (_) { raw.value = '{}'; }
      }
    });
    const progress = h('ol', { id: 'try-progress', class: 'log', role: 'log', 'aria-label': 'Progress', 'aria-live': 'polite' });
    const bar = h('progress', { id: 'try-bar', max: 100, hidden: true, 'aria-label': 'Progress of the call' });
    const outcome = h('div', { id: 'try-result', 'aria-live': 'polite' });
    const button = h('button', { class: 'primary', type: 'submit', text: 'Call the tool' });
    const form = h('form', { 'aria-label': `Call ${d.name}`, onsubmit: async (event) => {
      event.preventDefault();
      let args;
      try {
        args = rawBox.open ? JSON.parse(raw.value || '{}') : argumentsOf(fields);
      } catch (error) {
        outcome.replaceChildren(h('p', { class: 'notice bad', role: 'alert', text: `Arguments: ${error.message}` }));
        return;
      }
      button.disabled = true;
      progress.replaceChildren();
      outcome.replaceChildren(h('p', { class: 'muted', text: 'Calling…' }));
      try {
        await callTool(d, args, progress, bar, outcome);
      } finally {
        button.disabled = false;
      }
    } }, fields, rawBox, h('div', { class: 'row' }, button));
    return h('section', { id: 'try', tabindex: '-1' }, h('h2', { text: 'Try it' }),
      h('p', { class: 'muted', text: `Calls through the bridge's pipeline as you (surface ${session ? session.surface : '?'}): validated, permitted, logged.` }),
      place.state === 'blocked' ? h('p', { class: 'notice bad', text: `This tool is blocked on your surface (${place.reason}); a call is refused with that reason.` }) : null,
      form, bar, progress, outcome);
  }

  async function callTool(d, args, progress, bar, outcome) {
    const response = await fetch(`${ROOT}/ui/api/invoke`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/x-ndjson', ...authHeaders() },
      body: JSON.stringify({ tool: d.tool_id, arguments: args }),
    });
    if (response.status === 401) throw new NeedsToken();
    if (!(response.headers.get('content-type') || '').includes('ndjson')) {
      outcome.replaceChildren(errorNotice(await response.json(), response.status));
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline).trim();
        buffer = buffer.slice(newline + 1);
        if (line) showEvent(JSON.parse(line), progress, bar, outcome);
      }
      if (done) break;
    }
  }

  function showEvent(event, progress, bar, outcome) {
    if (event.type === 'progress') {
      const p = event.progress;
      const parts = [p.message, p.percent != null ? `${p.percent}%` : null,
        p.current_step != null ? `step ${p.current_step}${p.total_steps ? ` of ${p.total_steps}` : ''}` : null];
      progress.append(h('li', { class: 'progress-event', text: parts.filter(Boolean).join(' · ') || `notice ${p.sequence}` }));
      if (p.percent != null) { bar.hidden = false; bar.value = p.percent; }
      return;
    }
    const result = event.result;
    const error = result.error;
    bar.hidden = true;
    const head = error
      ? h('div', { class: 'notice bad', role: 'alert' },
        h('strong', { text: `${result.status}: ${error.error_class}` }), ` (HTTP ${event.status}) — ${error.message}`,
        h('div', {}, 'Recoverability: ', h('strong', { class: 'recoverability', text: error.recoverability || 'unknown' }),
          error.retry_after != null ? ` · retry after ${error.retry_after} s` : ''))
      : h('div', { class: 'notice ok', role: 'status' }, h('strong', { text: result.status }), ` (HTTP ${event.status})`,
        result.duration_ms != null ? ` in ${result.duration_ms} ms` : '');
    fill(outcome, head, h('h3', { text: 'Result envelope' }),
      h('pre', { id: 'try-envelope', text: pretty(result) }));
  }

  // ------------------------------------------------------------------ take it away

  function takeAway(exports) {
    const items = [
      ['mcp_config', 'MCP client config entry', 'Add to your MCP client\'s mcpServers; set A2T_BRIDGE_TOKEN.'],
      ['mcp_tool', 'MCP tools/list entry', 'How MCP clients of this bridge see the tool.'],
      ['curl', 'curl', 'One call over A2T REST.'],
      ['openai', 'OpenAI function', 'Chat Completions / Responses tools entry.'],
      ['anthropic', 'Anthropic tool', 'Messages API tools entry.'],
      ['gemini', 'Gemini function declaration', 'functionDeclarations entry.'],
    ];
    return h('section', { id: 'export', tabindex: '-1', class: 'exports' }, h('h2', { text: 'Take it away' }),
      h('p', { class: 'muted', text: 'No token is written in these: put yours in A2T_BRIDGE_TOKEN.' }),
      items.map(([key, title, help]) => {
        const text = typeof exports[key] === 'string' ? exports[key] : pretty(exports[key]);
        return h('section', { 'aria-labelledby': `export-${key}` },
          h('h3', { id: `export-${key}` }, title,
            h('button', { type: 'button', 'aria-label': `Copy ${title}`, text: 'Copy', onclick: () => copy(text, title) })),
          h('p', { class: 'muted', text: help }),
          h('pre', { id: `export-${key}-text`, text }));
      }));
  }

  // ------------------------------------------------------------------ surface

  async function surfacePage() {
    const s = await ensureSession();
    const answer = await api(`/surfaces/${encodeURIComponent(s.surface)}?deferred_limit=200`);
    if (!answer.ok) return show('Surface', errorNotice(answer.body, answer.status));
    const record = answer.body;
    const byName = (name) => h('a', { href: `#/tool/${encodeURIComponent(name)}`, text: name });
    const blocked = record.blocked_tools || [];
    const deferred = record.deferred_tools || [];
    const loaded = record.loaded_tools || [];
    show(`Surface ${record.surface_id}`,
      h('p', {}, 'What your token sees: ', h('strong', { text: `${s.loaded} loaded` }), ', ',
        h('strong', { text: `${s.deferred} deferred` }), ', ', h('strong', { text: `${s.blocked} blocked` }),
        '. Tools a rule of this surface hides are not listed anywhere.'),
      h('p', {}, h('button', { type: 'button', text: 'View as another token', onclick: () => signIn('Paste the token whose surface you want to see.') })),
      h('h2', { text: 'Blocked, with reasons' }),
      blocked.length ? table(`${blocked.length} blocked`, ['Tool', 'Reason'],
        blocked.map((b) => [byName(b.name), h('strong', { class: 'reason', text: b.reason })])) : h('p', { class: 'muted', text: 'None.' }),
      h('h2', { text: 'Loaded' }),
      loaded.length ? h('ul', {}, loaded.slice(0, 500).map((n) => h('li', {}, byName(n)))) : h('p', { class: 'muted', text: 'None.' }),
      h('h2', { text: 'Deferred' }),
      h('p', { class: 'muted', text: `Found through search; ${deferred.length < s.deferred ? `the first ${deferred.length} of ${s.deferred} listed, ` : ''}the catalog page lists them all.` }),
      deferred.length ? h('ul', {}, deferred.map((ref) => h('li', {}, byName(ref.name)))) : h('p', { class: 'muted', text: 'None.' }));
  }

  // ------------------------------------------------------------------ routing

  function markNav(page) {
    for (const link of document.querySelectorAll('.top nav a')) {
      if (link.dataset.page === page) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  }

  async function route() {
    const hash = location.hash.replace(/^#\/?/, '') || 'catalog';
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const parts = path.split('/');
    try {
      await ensureSession();
      if (parts[0] === 'upstreams') { markNav('upstreams'); await upstreamsPage(); }
      else if (parts[0] === 'surface') { markNav('surface'); await surfacePage(); }
      else if (parts[0] === 'tool' && parts[1]) { markNav('catalog'); await toolPage(decodeURIComponent(parts[1]), params); }
      else { markNav('catalog'); await catalogPage(params); }
    } catch (error) {
      if (error instanceof NeedsToken) {
        session = null;
        renderWho();
        signIn(token() ? 'The bridge did not accept this token.' : 'This bridge needs a token.');
      } else if (error.answer) {
        show('Error', errorNotice(error.answer.body, error.answer.status));
      } else {
        show('Error', h('p', { class: 'notice bad', role: 'alert', text: String(error) }));
      }
    }
  }

  window.addEventListener('hashchange', route);
  route();
})();
