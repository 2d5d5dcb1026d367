// One in-page pass that settles, assigns stable element ids and produces every text format asked for.
// Called as page.evaluate(OBSERVE_JS, opts); returns a JSON string (cheaper to move than an object tree).
// Ids live in the `data-webenv-id` attribute, set once per element, so they survive across steps
// while the element lives. The counter sits on the top window so same-origin frames share it.
async (opts) => {
  const ATTR = 'data-webenv-id';
  const want = opts.formats || {};
  const maxChars = opts.maxChars || 100000;
  const visibleOnly = !!opts.visibleOnly;

  // --- settle: step 3 of the settle rule, the DOM-quiet wait: settle/quiet.js, put here by observe.py ---

  let topWin = window;
  try { if (window.top && window.top.document) topWin = window.top; } catch (e) { /* cross-origin top */ }
  if (!topWin.__webenvNext) topWin.__webenvNext = 1;
  const idOf = (el) => {
    let id = el.getAttribute(ATTR);
    if (!id) { id = String(topWin.__webenvNext++); el.setAttribute(ATTR, id); }
    return id;
  };

  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BASE']);
  const INPUT_ROLES = {checkbox: 'checkbox', radio: 'radio', submit: 'button', button: 'button', reset: 'button',
    image: 'button', range: 'slider', number: 'spinbutton', search: 'searchbox', email: 'textbox', tel: 'textbox',
    url: 'textbox', text: 'textbox', password: 'textbox', date: 'Date', time: 'InputTime', 'datetime-local': 'DateTime',
    month: 'DateTime', week: 'DateTime', color: 'button', file: 'button'};
  // Chromium's own parts of date and time fields (shown in its tree as children of the field; en-US order):
  // an agent types into the field itself, so the parts are printed with the field's id.
  const DATE_PARTS = {date: ['spinbutton Month', 'spinbutton Day', 'spinbutton Year', 'button Show date picker'],
    time: ['spinbutton Hours', 'spinbutton Minutes', 'spinbutton AM/PM', 'button Show time picker'],
    'datetime-local': ['spinbutton Month', 'spinbutton Day', 'spinbutton Year', 'spinbutton Hours', 'spinbutton Minutes',
      'spinbutton AM/PM', 'button Show local date and time picker'],
    month: ['spinbutton Month', 'spinbutton Year', 'button Show month picker'],
    week: ['spinbutton Week', 'spinbutton Year', 'button Show week picker']};
  const TAG_ROLES = {BUTTON: 'button', TEXTAREA: 'textbox', OPTION: 'option', H1: 'heading', H2: 'heading',
    H3: 'heading', H4: 'heading', H5: 'heading', H6: 'heading', UL: 'list', OL: 'list', LI: 'listitem',
    NAV: 'navigation', MAIN: 'main', ASIDE: 'complementary', FORM: 'form', TABLE: 'table', TR: 'row',
    TD: 'cell', TH: 'columnheader', P: 'paragraph', FIGURE: 'figure', LABEL: 'LabelText', DIALOG: 'dialog', SUMMARY: 'button',
    DETAILS: 'group', ARTICLE: 'article', HR: 'separator', FIELDSET: 'group', PROGRESS: 'progressbar',
    IFRAME: 'Iframe', HEADER: 'banner', FOOTER: 'contentinfo', DL: 'list', DT: 'term', DD: 'definition',
    BLOCKQUOTE: 'blockquote', CAPTION: 'caption', METER: 'meter', OPTGROUP: 'group', LEGEND: 'legend'};
  const NAME_FROM_CONTENT = new Set(['link', 'button', 'heading', 'option', 'cell', 'gridcell', 'columnheader',
    'rowheader', 'tab', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'checkbox', 'radio', 'switch', 'treeitem',
    'LabelText', 'term', 'legend', 'tooltip', 'clickable']);
  // Of those, the roles whose MARKDOWN does not print the name: their content is written out instead (a table
  // cell's text and links, a label's words and the control inside it).
  const MD_CONTENT_ROLES = new Set(['cell', 'gridcell', 'columnheader', 'rowheader', 'LabelText', 'term', 'legend',
    'tooltip']);
  const INTERACTIVE_ROLES = new Set(['link', 'button', 'checkbox', 'radio', 'textbox', 'searchbox', 'combobox',
    'listbox', 'option', 'slider', 'spinbutton', 'switch', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'treeitem', 'Date', 'InputTime', 'DateTime', 'clickable']);
  // Elements without a role of their own that Chromium still shows, found from their computed style:
  // `content: url(...)` makes an image (MiniWoB's email and social-media icons), and the outermost element of a
  // `cursor: pointer` region is what a page made clickable with a script listener (MiniWoB click-link's words),
  // which an agent must be able to click by id; the tree prints it as `clickable` (Chromium: a generic node).
  const KEEP_ATTRS = new Set(['id', 'class', 'href', 'src', 'alt', 'title', 'type', 'name', 'value', 'placeholder',
    'role', 'for', 'checked', 'selected', 'disabled', 'action', 'method', 'target', 'colspan', 'rowspan',
    'multiple', 'required', 'readonly', 'tabindex', 'contenteditable']);

  const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);
  const norm = (s) => (s || '').replace(/\s+/g, ' ').trim();

  const FOCUSABLE = new Set(['BUTTON', 'INPUT', 'SELECT', 'TEXTAREA']);
  // a grid (an interactive table) has row groups and rows named from their content, as Chromium shows them
  const inGrid = (el) => {
    const t = el.closest('table');
    const r = t && t.getAttribute('role');
    return r === 'grid' || r === 'treegrid';
  };
  const pointer = (el) => el.ownerDocument.defaultView.getComputedStyle(el).cursor === 'pointer';
  const roleOf = (el) => {
    const explicit = el.getAttribute('role');
    const tag = el.tagName;
    if (explicit) {
      const r = explicit.split(' ')[0];
      // ARIA's presentational-role conflict rule (Chromium follows it): a focusable element keeps its own role,
      // e.g. jQuery UI's tab links (<a href role=presentation tabindex=-1>) stay links
      const focusable = el.hasAttribute('tabindex') || FOCUSABLE.has(tag) || (tag === 'A' && el.hasAttribute('href'));
      if (!((r === 'presentation' || r === 'none') && focusable)) return r;
    }
    // an anchor without href is a link when a script made it one (Chromium: it has a click listener; a page
    // script's listener is invisible here, its pointer cursor or onclick is not)
    if (tag === 'A') return el.hasAttribute('href') || el.hasAttribute('onclick') || pointer(el) ? 'link' : '';
    if (tag === 'INPUT') return el.type === 'hidden' ? '' : (INPUT_ROLES[el.type] || 'textbox');
    if (tag === 'SELECT') return (el.multiple || el.size > 1) ? 'listbox' : 'combobox';
    if (tag === 'IMG') return el.getAttribute('alt') === '' ? '' : 'img';
    if (tag === 'SECTION') return (el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby')) ? 'region' : '';
    if (el.isContentEditable && (el.parentElement === null || !el.parentElement.isContentEditable)) return 'textbox';
    if (tag === 'TH') {
      const scope = (el.getAttribute('scope') || '').toLowerCase();
      if (scope === 'row' || scope === 'rowgroup') return 'rowheader';
      if (scope === 'col' || scope === 'colgroup') return 'columnheader';
      const row = el.parentElement;
      if (row && row.parentElement && row.parentElement.tagName === 'THEAD') return 'columnheader';
      return row && row.querySelector(':scope > td') ? 'rowheader' : 'columnheader';
    }
    if (tag === 'TD') return inGrid(el) ? 'gridcell' : 'cell';
    if (tag === 'THEAD' || tag === 'TBODY' || tag === 'TFOOT') return inGrid(el) ? 'rowgroup' : '';
    // an svg is an image unless it holds text (then its text is read, and clicked, as text)
    if (tag === 'svg' || tag === 'SVG') return el.querySelector('text') ? '' : 'img';
    const known = TAG_ROLES[tag];
    if (known) return known;
    if (tag === 'BODY' || tag === 'HTML') return '';
    const win = el.ownerDocument.defaultView;
    const listened = el.onclick || (win.__webenvClickable && win.__webenvClickable(el));  // pool.CLICK_WATCH_JS
    if (el.namespaceURI !== 'http://www.w3.org/1999/xhtml') return listened ? 'clickable' : '';
    const cs = win.getComputedStyle(el);
    if (cs.content && cs.content.startsWith('url(')) return 'img';
    if (listened) return 'clickable';
    if (cs.cursor === 'pointer') {
      const p = el.parentElement;
      if (!p || !pointer(p)) return 'clickable';
    }
    return '';
  };

  const labelFor = (el) => {
    const doc = el.getRootNode();  // the document, or the shadow root the field lives in
    if (el.id) {
      try {
        const l = doc.querySelector('label[for="' + CSS.escape(el.id) + '"]');
        if (l) return norm(l.innerText || l.textContent);
      } catch (e) { /* odd id */ }
    }
    const wrap = el.closest('label');
    if (wrap) return norm(wrap.innerText || wrap.textContent);
    return '';
  };

  // Name from content the accessible-name way for what innerText misses: a descendant's aria-label or alt.
  const contentName = (el) => {
    if (!el.querySelector('[aria-label],[aria-labelledby],img[alt],input,select,textarea')) {
      return norm(el.innerText !== undefined ? el.innerText : el.textContent);
    }
    const parts = [];
    const rec = (n) => {
      for (const c of n.childNodes) {
        if (c.nodeType === 3) { parts.push(c.nodeValue); continue; }
        if (c.nodeType !== 1 || SKIP.has(c.tagName) || c.getAttribute('aria-hidden') === 'true') continue;
        if (c.checkVisibility && !c.checkVisibility({visibilityProperty: true})) continue;
        // an embedded field names by its value (accname 2E), before its own label
        if (c.tagName === 'SELECT') { parts.push(' ' + (c.selectedOptions[0] ? c.selectedOptions[0].text : '') + ' '); continue; }
        if (c.tagName === 'TEXTAREA' || (c.tagName === 'INPUT' && !['checkbox', 'radio', 'hidden', 'submit', 'button',
          'reset', 'image', 'file', 'color'].includes(c.type))) { parts.push(' ' + (c.type === 'password' ? '' : c.value) + ' '); continue; }
        const al = c.getAttribute('aria-label');
        if (al && al.trim()) { parts.push(' ' + al + ' '); continue; }
        if (c.tagName === 'IMG') { parts.push(' ' + (c.getAttribute('alt') || '') + ' '); continue; }
        rec(c);
      }
    };
    rec(el);
    return norm(parts.join(''));
  };

  const nameOf = (el, role) => {
    const doc = el.getRootNode();
    const lb = el.getAttribute('aria-labelledby');
    if (lb) {
      const t = lb.split(/\s+/).map((i) => doc.getElementById(i)).filter(Boolean)
        .map((n) => norm(n.textContent)).join(' ');
      if (t) return clip(t, 200);
    }
    const al = el.getAttribute('aria-label');
    if (al && al.trim()) return clip(norm(al), 200);
    const tag = el.tagName;
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') {
      if (tag === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type)) return clip(norm(el.value), 200);
      const l = labelFor(el);
      if (l) return clip(l, 200);
      return clip(norm(el.getAttribute('placeholder') || el.getAttribute('title') || ''), 200);
    }
    if (tag === 'IMG') return clip(norm(el.getAttribute('alt') || el.getAttribute('title') || ''), 200);
    if (tag === 'svg' || tag === 'SVG') {
      const t = el.querySelector(':scope > title');
      return clip(norm(t ? t.textContent : ''), 200);
    }
    // a clickable container (a script listens on it for its children) is no one thing to name: its children speak
    if (role === 'clickable' && el.childElementCount > 0) return clip(norm(el.getAttribute('title') || ''), 200);
    if (NAME_FROM_CONTENT.has(role) || (role === 'row' && inGrid(el))) return clip(contentName(el), 200);
    // a group takes its name from its legend, a table from its caption, a figure from its figcaption
    const first = tag === 'FIELDSET' ? 'LEGEND' : tag === 'TABLE' ? 'CAPTION' : tag === 'FIGURE' ? 'FIGCAPTION' : '';
    if (first) {
      for (const c of el.children) if (c.tagName === first) return clip(norm(c.innerText || c.textContent), 200);
    }
    return clip(norm(el.getAttribute('title') || ''), 200);
  };

  const hidden = (el, win) => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true') return true;
    if (el.checkVisibility) return !el.checkVisibility({visibilityProperty: true, opacityProperty: false});
    const cs = win.getComputedStyle(el);
    return cs.display === 'none' || cs.visibility === 'hidden';
  };

  const vw = window.innerWidth, vh = window.innerHeight;
  const axLines = [], htmlParts = [], mdParts = [], domNodes = [], elements = [];
  let axLen = 0, htmlLen = 0, mdLen = 0;
  const needIds = want.axtree || want.html || want.markdown || want.dom || want.elements;

  // Incremental passes (opts.incremental, ObservationSpec.incremental): a MutationObserver kept on the document
  // (window.__webenvInc) records what changed since the last incremental pass; an element whose subtree saw no
  // change reuses its AXTREE and MARKDOWN lines from that pass instead of being walked again. What changes without
  // a mutation is walked every time (VOLATILE: form fields' values and checked states, frames, shadow and slot
  // content, names taken from elsewhere), and so are the focused element and the innermost hovered ones, before and
  // now (the innermost two: a hover menu's item and its list), and elements given a click listener since (settle/watchers.py CLICK_WATCH_JS). A style sheet change, too
  // many records or opts.fresh make the pass a whole walk (it fills the cache again).
  const VOLATILE = new Set(['INPUT', 'SELECT', 'TEXTAREA', 'OPTION', 'OPTGROUP', 'IFRAME', 'SLOT', 'PROGRESS', 'METER']);
  const MAX_RECORDS = 20000;
  let inc = null;
  let volatiles = 0, noReuse = 0;

  const isInteractive = (el, role) => INTERACTIVE_ROLES.has(role) || el.hasAttribute('onclick') ||
    el.isContentEditable || (el.tabIndex >= 0 && el.hasAttribute('tabindex') && el.tagName !== 'BODY');

  const states = (el, role, doc) => {
    const s = [];
    if (el.getRootNode().activeElement === el) s.push('focused');
    if (role === 'checkbox' || role === 'radio' || role === 'switch' || role === 'menuitemcheckbox') {
      const ac = el.getAttribute('aria-checked');
      s.push('checked=' + (ac !== null ? ac : String(!!el.checked)));
    }
    if (role === 'option' && (el.selected || el.getAttribute('aria-selected') === 'true')) s.push('selected');
    if (el.disabled || el.getAttribute('aria-disabled') === 'true') s.push('disabled');
    const ex = el.getAttribute('aria-expanded');
    if (ex !== null) s.push('expanded=' + ex);
    if (el.required) s.push('required');
    if (role === 'heading') s.push('level=' + (el.getAttribute('aria-level') || el.tagName.slice(1)));
    if ((role === 'textbox' || role === 'searchbox' || role === 'combobox' || role === 'spinbutton' || role === 'slider' ||
         role === 'Date' || role === 'InputTime' || role === 'DateTime') &&
        el.value !== undefined && el.value !== '' && el.type !== 'password') s.push('value=' + JSON.stringify(clip(String(el.value), 200)));
    return s;
  };

  const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const escAttr = (s) => esc(s).replace(/"/g, '&quot;');

  // The children an agent sees: an open shadow root's content instead of the host's light children (which
  // show through its slots), a slot's assigned nodes (or its fallback content).
  const kids = (el) => {
    if (el.shadowRoot) return el.shadowRoot.childNodes;
    if (el.tagName === 'SLOT') {
      const assigned = el.assignedNodes({flatten: true});
      return assigned.length ? assigned : el.childNodes;
    }
    return el.childNodes;
  };

  // textId: the id of the element a text node sits in when that element has no line of its own, printed on
  // the text's line, so every text an agent reads can be clicked by id (MiniWoB click-link's words, svg labels).
  // inNamed: inside an element whose AXTREE line carries its text; mdIn: inside one whose MARKDOWN carries it.
  const walk = (list, frame, depth, offX, offY, win, parentDom, inNamed, mdIn, mdPrefix, textId) => {
    for (const node of list) {
      if (node.nodeType === 3) {
        const t = norm(node.nodeValue);
        if (!t) continue;
        if (want.axtree && !inNamed && axLen < maxChars) {
          const line = '\t'.repeat(depth) + (textId ? '[' + textId + '] ' : '') + 'StaticText ' + JSON.stringify(clip(t, 300));
          axLines.push(line); axLen += line.length + 1;
        }
        if (want.html && htmlLen < maxChars) { const h = esc(t); htmlParts.push(h); htmlLen += h.length; }
        if (want.markdown && !mdIn && mdLen < maxChars) { mdParts.push(t + ' '); mdLen += t.length + 1; }
        if (want.dom) domNodes.push({p: parentDom, t: '#text', x: clip(t, 1000)});
        continue;
      }
      if (node.nodeType === 1) element(node, frame, depth, offX, offY, win, parentDom, inNamed, mdIn, mdPrefix);
    }
  };

  // One element and its subtree; with incremental reuse (inc), a clean subtree's lines from the last pass.
  const element = (el, frame, depth, offX, offY, win, parentDom, inNamed, mdIn, mdPrefix) => {
    if (!inc) { elementWalk(el, frame, depth, offX, offY, win, parentDom, inNamed, mdIn, mdPrefix); return; }
    const key = depth + (inNamed ? 'n' : '') + (mdIn ? 'm' : '') + frame;
    // a frame's document and a shadow root are outside the observer's reach: their content is walked every time
    const deep = inc.deep.has(el) || el.tagName === 'IFRAME' || !!el.shadowRoot || el.tagName === 'SLOT';
    if (!deep && !noReuse && !inc.path.has(el)) {
      const c = inc.cache.get(el);
      if (c && c.key === key && !c.vol && axLen + c.axLen < maxChars && mdLen + c.mdLen < maxChars) {
        for (let i = c.a0; i < c.a1; i++) axLines.push(c.ax[i]);
        for (let i = c.m0; i < c.m1; i++) mdParts.push(c.md[i]);
        axLen += c.axLen; mdLen += c.mdLen;
        inc.cache.set(el, {key, ax: axLines, a0: axLines.length - (c.a1 - c.a0), a1: axLines.length, md: mdParts,
          m0: mdParts.length - (c.m1 - c.m0), m1: mdParts.length, axLen: c.axLen, mdLen: c.mdLen, vol: false});
        inc.reused++;
        return;
      }
    }
    const a0 = axLines.length, m0 = mdParts.length, al0 = axLen, ml0 = mdLen, v0 = volatiles;
    if (deep) noReuse++;
    if (deep || VOLATILE.has(el.tagName) || el.hasAttribute('aria-labelledby')) volatiles++;
    elementWalk(el, frame, depth, offX, offY, win, parentDom, inNamed, mdIn, mdPrefix);
    if (deep) noReuse--;
    inc.walked++;
    if (axLen < maxChars && mdLen < maxChars) {
      inc.cache.set(el, {key, ax: axLines, a0, a1: axLines.length, md: mdParts, m0, m1: mdParts.length,
        axLen: axLen - al0, mdLen: mdLen - ml0, vol: volatiles > v0});
    }
  };

  const elementWalk = (el, frame, depth, offX, offY, win, parentDom, inNamed, mdIn, mdPrefix) => {
    const doc = el.ownerDocument;
    if (SKIP.has(el.tagName)) return;
    if (el.tagName !== 'OPTION' && el.tagName !== 'OPTGROUP' && hidden(el, win)) return;  // options of a closed select still count
    const role = roleOf(el);
    const id = needIds ? idOf(el) : '';
    let visible = true;
    let rect = null;
    const interactive = isInteractive(el, role);
    if (visibleOnly || (want.elements && interactive)) {
      const r = el.getBoundingClientRect();
      rect = {x: r.x + offX, y: r.y + offY, width: r.width, height: r.height};
      visible = r.width > 0 && r.height > 0 && rect.x + r.width > 0 && rect.y + r.height > 0 && rect.x < vw && rect.y < vh;
    }
    const shown = !visibleOnly || visible;
    let name = '';
    const describe = role && role !== 'generic' && role !== 'none' && role !== 'presentation';
    if (describe && (want.axtree || want.markdown || (want.elements && interactive))) name = nameOf(el, role);

    let childDepth = depth;
    let lined = false;
    const childNamed = inNamed || (describe && NAME_FROM_CONTENT.has(role) && name !== '');
    if (want.axtree && describe && shown && axLen < maxChars) {
      const st = states(el, role, doc);
      const line = '\t'.repeat(depth) + '[' + id + '] ' + role + ' ' + JSON.stringify(name) + (st.length ? ' ' + st.join(', ') : '');
      axLines.push(line); axLen += line.length + 1;
      childDepth = depth + 1;
      lined = true;
      const parts = el.tagName === 'INPUT' ? DATE_PARTS[el.type] : null;
      if (parts) {
        for (const part of parts) {
          const sp = part.indexOf(' ');
          const pl = '\t'.repeat(childDepth) + '[' + id + '] ' + part.slice(0, sp) + ' ' + JSON.stringify(part.slice(sp + 1));
          axLines.push(pl); axLen += pl.length + 1;
        }
      }
    }
    if (want.elements && interactive && (!visibleOnly || visible)) {
      elements.push({
        element_id: id, tag: el.tagName.toLowerCase(), role, name,
        text: clip(norm(el.innerText || ''), 100), bbox: rect, visible,
        clickable: true, focused: el.getRootNode().activeElement === el,
        value: (el.value !== undefined && el.type !== 'password' && el.tagName !== 'BUTTON' && el.tagName !== 'LI') ? String(el.value) : '',
        checked: !!el.checked, disabled: !!el.disabled, href: el.tagName === 'A' ? (el.href || '') : '', frame,
      });
    }
    let domIndex = -1;
    if (want.dom) {
      const attrs = {};
      for (const a of el.attributes) if (KEEP_ATTRS.has(a.name) || a.name.startsWith('aria-')) attrs[a.name] = clip(a.value, 300);
      domIndex = domNodes.length;
      domNodes.push({p: parentDom, t: el.tagName.toLowerCase(), a: attrs, i: id});
    }
    let closeTag = '';
    if (want.html && htmlLen < maxChars) {
      let s = '<' + el.tagName.toLowerCase() + ' bid="' + id + '"';
      for (const a of el.attributes) {
        if ((KEEP_ATTRS.has(a.name) || a.name.startsWith('aria-')) && !(a.name === 'src' && a.value.startsWith('data:'))) {
          s += ' ' + a.name + '="' + escAttr(clip(a.value, 300)) + '"';
        }
      }
      if ((el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') && el.value && !el.hasAttribute('value') && el.type !== 'password') {
        s += ' value="' + escAttr(clip(el.value, 300)) + '"';
      }
      s += '>';
      htmlParts.push(s); htmlLen += s.length;
      closeTag = '</' + el.tagName.toLowerCase() + '>';
    }
    let mdClose = '';
    let mdNamed = false;
    if (want.markdown && shown && mdLen < maxChars && !mdIn) {
      const tag = el.tagName;
      let s = '';
      if (role === 'heading') { s = '\n' + '#'.repeat(Number(tag.slice(1)) || 2) + ' [' + id + '] ' + name + '\n'; mdNamed = true; }
      else if (role === 'link') { s = '[' + id + ':' + name + '](' + (el.getAttribute('href') || '') + ') '; mdNamed = true; }
      else if (role === 'button') { s = '[' + id + ':button ' + name + '] '; mdNamed = true; }
      else if (tag === 'IMG') { s = '![' + name + ']'; }
      else if (INTERACTIVE_ROLES.has(role)) {
        const st = states(el, role, doc).filter((x) => x !== 'focused');
        s = '[' + id + ':' + role + (name ? ' ' + name : '') + (st.length ? ' ' + st.join(' ') : '') + '] ';
        mdNamed = role === 'option' || role === 'checkbox' || role === 'radio' || role === 'clickable';
      } else if (tag === 'LI') { s = '\n- '; }
      else if (tag === 'TR') { s = '\n|'; }
      else if (tag === 'TD' || tag === 'TH') { s = ' '; mdClose = ' |'; }
      else if (['P', 'DIV', 'SECTION', 'ARTICLE', 'UL', 'OL', 'TABLE', 'FORM', 'BR', 'HEADER', 'FOOTER', 'NAV', 'MAIN'].includes(tag)) { s = '\n'; mdClose = '\n'; }
      if (s) { mdParts.push(s); mdLen += s.length; }
    }
    const mdChild = mdIn || mdNamed || (describe && NAME_FROM_CONTENT.has(role) && name !== '' && !MD_CONTENT_ROLES.has(role));
    if (el.tagName === 'IFRAME') {
      let sub = null;
      try { sub = el.contentDocument; } catch (e) { sub = null; }
      if (sub && sub.body) {
        const r = el.getBoundingClientRect();
        const idx = Array.prototype.indexOf.call(doc.querySelectorAll('iframe'), el);
        const subFrame = frame === '' ? String(idx) : frame + '.' + idx;
        walk(kids(sub.body), subFrame, childDepth, offX + r.x + el.clientLeft, offY + r.y + el.clientTop,
          sub.defaultView || win, domIndex, childNamed, mdChild, mdPrefix, '');
      }
    } else if (role !== 'img' || el.tagName === 'IMG') {
      walk(kids(el), frame, childDepth, offX, offY, win, domIndex, childNamed || mdNamed, mdChild, mdPrefix,
        lined ? '' : id);
    }
    if (closeTag && htmlLen < maxChars) { htmlParts.push(closeTag); htmlLen += closeTag.length; }
    if (mdClose && mdLen < maxChars) { mdParts.push(mdClose); mdLen += mdClose.length; }
  };

  const deepActive = () => {
    let a = document.activeElement;
    try {
      for (;;) {
        if (a && a.tagName === 'IFRAME' && a.contentDocument) a = a.contentDocument.activeElement;
        else if (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
        else break;
      }
    } catch (e) { /* cross-origin frame focused */ }
    return a;
  };

  const incStart = () => {
    let st = window.__webenvInc;
    let full = !!opts.fresh;
    if (!st) {
      st = {records: [], overflow: false, cache: new WeakMap(), sig: '', hover: [], active: null, token: '',
        doc: Math.random().toString(36).slice(2), gen: 0, ax: null, md: null};
      st.mo = new MutationObserver((recs) => {
        if (st.overflow) return;
        if (st.records.length + recs.length > MAX_RECORDS) { st.overflow = true; st.records = []; return; }
        for (const r of recs) st.records.push(r);
      });
      st.mo.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
      Object.defineProperty(window, '__webenvInc', {value: st, configurable: true});
      full = true;
    }
    const recs = st.records.concat(st.mo.takeRecords());
    const sig = (want.axtree ? 'a' : '') + (want.markdown ? 'm' : '') + maxChars;
    if (st.overflow || st.sig !== sig || (window.__webenvListenAdded || []).length > MAX_RECORDS) full = true;
    if (st.sig !== sig) st.cache = new WeakMap();
    const path = new Set(), deep = new Set();
    const mark = (n) => { while (n && !path.has(n)) { path.add(n); n = n.parentNode || n.host; } };
    const head = document.head;
    for (const r of recs) {
      if (full) break;
      const t = r.target;
      if (head && (t === head || head.contains(t))) { full = true; break; }
      if (r.type === 'attributes') {
        if (r.attributeName === ATTR) continue;  // ids this pass or the last gave
        deep.add(t); mark(t);
      } else if (r.type === 'characterData') {
        if (t.parentNode && t.parentNode.nodeName === 'STYLE') { full = true; break; }
        mark(t.parentNode);
      } else {
        mark(t);
        if (t.nodeName === 'STYLE') { full = true; break; }
        for (const n of [...r.addedNodes, ...r.removedNodes]) if (n.nodeName === 'STYLE' || n.nodeName === 'LINK') full = true;
        for (const n of [r.previousSibling, r.nextSibling]) if (n && n.nodeType === 1) { deep.add(n); mark(n); }
      }
    }
    const hover = Array.from(document.querySelectorAll(':hover')).slice(-2);
    const active = deepActive();
    for (const n of [...hover, ...st.hover, active, st.active, ...(window.__webenvListenAdded || [])]) {
      if (n && n.nodeType === 1) { deep.add(n); mark(n); }
    }
    inc = {st, cache: st.cache, path, deep, reused: 0, walked: 0, full, sig, hover, active};
    if (full) noReuse = 1;  // walked whole; the cache is filled again
  };

  // Line edits [start, deleted, lines] turning a into b: the common head and tail trimmed, then each line of b's
  // middle matched to the next equal line of a's within 64 lines (exact whatever it matches).
  const diffLines = (a, b) => {
    let h = 0;
    while (h < a.length && h < b.length && a[h] === b[h]) h++;
    let t = 0;
    while (t < a.length - h && t < b.length - h && a[a.length - 1 - t] === b[b.length - 1 - t]) t++;
    const aEnd = a.length - t, bEnd = b.length - t;
    const pos = new Map();
    for (let i = aEnd - 1; i >= h; i--) { const p = pos.get(a[i]); if (p) p.push(i); else pos.set(a[i], [i]); }
    const edits = [];
    let i = h, from = h, lines = [];
    for (let j = h; j < bEnd; j++) {
      const p = pos.get(b[j]);
      while (p && p.length && p[p.length - 1] < i) p.pop();  // positions kept in descending order: next is last
      const k = p && p.length ? p[p.length - 1] : -1;
      if (k >= 0 && k - i <= 64) {
        if (k > from || lines.length) edits.push([from, k - from, lines]);
        p.pop(); i = k + 1; from = i; lines = [];
      } else lines.push(b[j]);
    }
    if (aEnd > from || lines.length) edits.push([from, aEnd - from, lines]);
    return edits;
  };

  const incEnd = () => {
    const st = inc.st;
    st.mo.takeRecords();  // this pass's own id attributes (the walk runs no page script)
    st.records = []; st.overflow = false; st.sig = inc.sig; st.hover = inc.hover; st.active = inc.active;
    window.__webenvListenAdded = [];
  };

  const body = document.body || document.documentElement;
  if (opts.incremental && body && (want.axtree || want.markdown) && !want.html && !want.dom && !want.elements && !visibleOnly) {
    incStart();
  }
  if (body && needIds) walk(kids(body), '', 0, 0, 0, window, -1, false, false, '', '');
  if (inc) incEnd();

  let focused = '';
  const a = deepActive();
  if (a && a !== document.body && a.getAttribute) {
    try { focused = a.getAttribute(ATTR) || ''; } catch (e) { /* cross-origin frame focused */ }
  }

  const se = document.scrollingElement || document.documentElement;
  const out = {
    url: location.href, title: document.title, focused,
    scroll: {x: window.scrollX, y: window.scrollY, scroll_width: se ? se.scrollWidth : 0,
      scroll_height: se ? se.scrollHeight : 0, viewport_width: vw, viewport_height: vh},
  };
  if (want.axtree) out.axtree = clip(axLines.join('\n'), maxChars);
  if (want.html) out.html = clip(htmlParts.join(''), maxChars);
  if (want.markdown) out.markdown = clip(mdParts.join('').replace(/[ \t]+\n/g, '\n').replace(/\n{3,}/g, '\n\n').trim(), maxChars);
  if (want.dom) out.dom = domNodes;
  if (want.elements) out.elements = elements;
  if (inc) {
    // The text goes back as line edits to this page's last incremental pass when the caller holds that pass's
    // text (opts.baseToken): a click on the ~8,000-element page moves ~1 kB instead of ~300 kB.
    const st = inc.st;
    const ax = want.axtree ? out.axtree.split('\n') : null, md = want.markdown ? out.markdown.split('\n') : null;
    if (opts.baseToken && opts.baseToken === st.token && (!ax || st.ax) && (!md || st.md)) {
      out.edits = {axtree: ax ? diffLines(st.ax, ax) : null, markdown: md ? diffLines(st.md, md) : null};
      delete out.axtree; delete out.markdown;
    }
    st.token = st.doc + '.' + (++st.gen); st.ax = ax; st.md = md;
    out.incremental = {full: inc.full, reused: inc.reused, walked: inc.walked, token: st.token};
  }
  out.popups = topWin.__webenvPopups || 0;  // new tabs this page tried to open since the last pass
  topWin.__webenvPopups = 0;
  out.navPending = window.__webenvNavPending || 0;  // a navigation this page started (settle/watchers.py)
  if (opts.miniwob) {
    // MiniWoB++ reward protocol (core.js globals); read in the same round trip as the observation.
    out.miniwob = {done: !!window.WOB_DONE_GLOBAL, reward: Number(window.WOB_REWARD_GLOBAL || 0),
      raw_reward: Number(window.WOB_RAW_REWARD_GLOBAL || 0), reason: window.WOB_REWARD_REASON == null ? '' : String(window.WOB_REWARD_REASON)};
  }
  return JSON.stringify(out);
}
