// Step 3 of the settle rule (settle/__init__.py): the DOM-quiet wait, the first part of the observation pass
// (observe.js), where observe.py puts it in place of its `// --- settle:` line, so it runs inside the pass's own
// evaluate (one round trip). Reads `opts` (quietMs, maxMs, frameMaxMs, frameWait, quietSinceAction) of the pass.
  // --- settle: wait until the DOM has been quiet for quietMs (bounded by maxMs) -------------------
  // After an action on this document (opts.quietSinceAction): quiet since the later of the last mutation and
  // the last input event, which QUIET_WATCH_JS (settle/watchers.py) keeps (the time already spent counts).
  // Otherwise (a first observation, a new document whose frames may still be loading, a page without the watch):
  // from now.
  // Same-origin frames are waited for as the main document is: until their document has come and fired
  // DOMContentLoaded (an iframe's load is not its parent's: its initial about:blank can still stand at the parent's
  // DOMContentLoaded, or after its request ended, and the frame's content was then missing from a first
  // observation), capped by opts.frameMaxMs (the navigation cap) once per frame element.
  const pendingFrame = (doc, depth) => {
    for (const f of doc.querySelectorAll('iframe')) {
      let sub = null;
      try { sub = f.contentDocument; } catch (e) { sub = null; }
      if (!sub || f.__webenvFrameGivenUp) continue;  // cross-origin (not observed), or waited for its cap once
      const src = (f.getAttribute('src') || '').trim();
      if (sub.readyState === 'loading' || (sub.URL === 'about:blank' && src && !/^(about|javascript):/i.test(src)
          && !f.hasAttribute('srcdoc') && f.loading !== 'lazy')) return f;
      const inner = depth < 4 ? pendingFrame(sub, depth + 1) : null;
      if (inner) return inner;
    }
    return null;
  };
  if (opts.quietMs > 0) {
    const start = performance.now();
    const watched = !!opts.quietSinceAction && typeof window.__webenvQuietSince === 'number';
    let last = watched ? window.__webenvQuietSince : start;
    const mo = new MutationObserver(() => { last = performance.now(); });
    mo.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
    // scroll events and rAF callbacks run with the next frame: let one pass (capped: hidden tabs get no frames),
    // waited for beside the quiet window, not before it
    let framed = !opts.frameWait;
    const frame = framed ? null : Promise.race([new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))),
      new Promise((r) => setTimeout(r, 100))]).then(() => { framed = true; });
    for (;;) {
      const now = performance.now();
      if (watched) last = Math.max(last, window.__webenvQuietSince);
      const loading = pendingFrame(document, 0);  // the quiet window counts from the last frame's document
      if (loading && now - start >= (opts.frameMaxMs || opts.maxMs)) { loading.__webenvFrameGivenUp = true; continue; }
      if (loading) last = now;
      else if ((framed && now - last >= opts.quietMs) || now - start >= opts.maxMs) break;
      const tick = new Promise((r) => setTimeout(r, Math.max(1, opts.quietMs - (now - last))));
      await (framed ? tick : Promise.race([tick, frame]));
    }
    mo.disconnect();
  }
