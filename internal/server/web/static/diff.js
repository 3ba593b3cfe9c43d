// A unified diff (the run's patch) as a readable, colored view: one box
// per file with its added and removed line counts, hunks, and +/- lines.

import {h} from './dom.js';

// maxLines bounds the lines drawn; the rest is left to the download.
const maxLines = 20000;

// parseDiff splits a unified diff into files: {name, lines: [[kind, text]]}
// with kind one of add, del, hunk, meta, ctx.
export function parseDiff(text) {
  const files = [];
  let cur = null;
  const start = (name) => {
    cur = {name, adds: 0, dels: 0, lines: []};
    files.push(cur);
  };
  for (const line of text.split('\n')) {
    if (line.startsWith('diff --git ')) {
      const m = line.match(/^diff --git a\/(.*) b\/(.*)$/);
      start(m ? m[2] : line.slice(11));
      cur.lines.push(['meta', line]);
      continue;
    }
    if (!cur) {
      if (line === '') continue;
      start(line.startsWith('--- ') ? '' : '(patch)');
    }
    if (line.startsWith('+++ ') && cur.lines.every((l) => l[0] === 'meta')) {
      const name = line.slice(4).replace(/^b\//, '').replace(/\t.*$/, '');
      if (!cur.name || cur.name === '(patch)') cur.name = name === '/dev/null' ? cur.name : name;
      cur.lines.push(['meta', line]);
    } else if (line.startsWith('--- ') && cur.lines.every((l) => l[0] === 'meta')) {
      if (!cur.name) cur.name = line.slice(4).replace(/^a\//, '').replace(/\t.*$/, '');
      cur.lines.push(['meta', line]);
    } else if (line.startsWith('@@')) {
      cur.lines.push(['hunk', line]);
    } else if (line.startsWith('+')) {
      cur.adds++;
      cur.lines.push(['add', line]);
    } else if (line.startsWith('-')) {
      cur.dels++;
      cur.lines.push(['del', line]);
    } else if (cur.lines.some((l) => l[0] === 'hunk')) {
      cur.lines.push(['ctx', line]);
    } else {
      cur.lines.push(['meta', line]);
    }
  }
  // A trailing newline leaves an empty context line.
  for (const f of files) {
    const last = f.lines[f.lines.length - 1];
    if (last && last[0] === 'ctx' && last[1] === '') f.lines.pop();
  }
  return files;
}

// renderDiff draws a diff; cut says the text was cut before its end.
export function renderDiff(text, cut) {
  const files = parseDiff(text);
  const out = h('div.diff');
  let drawn = 0;
  for (const f of files) {
    const body = h('div.diff-body');
    for (const [kind, line] of f.lines) {
      if (kind === 'meta') continue;
      if (drawn >= maxLines) break;
      body.append(h('span.dl', {class: kind}, line === '' ? ' ' : line));
      drawn++;
    }
    out.append(h('section.diff-file', {'aria-label': 'Changes to ' + f.name},
      h('div.diff-file-head', h('span', f.name || '(unnamed)'),
        h('span.stat-add', '+' + f.adds), h('span.stat-del', '−' + f.dels)),
      body));
  }
  if (drawn >= maxLines || cut) {
    out.append(h('p.muted.small', 'The patch is longer than shown here; download it for the rest.'));
  }
  if (!files.length) out.append(h('p.muted', 'The patch is empty.'));
  return out;
}
