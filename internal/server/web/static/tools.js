// How a tool call reads: its main argument (a command as a shell line, a
// path), or its arguments as JSON, size-capped.

import {h, clip, num} from './dom.js';

const maxProse = 20000;
const maxArgs = 8000;

// prose is a model's or a person's text, kept as written (line breaks
// too), cut at a bound.
export function prose(t) {
  const [shown, cut] = clip(t, maxProse);
  return h('div', h('p.prose', shown), cut ? h('p.muted.small', '… ' + num(cut) + ' more characters') : null);
}

// argsView shows the arguments of a call of tool.
export function argsView(tool, args) {
  args = args || {};
  if (tool === 'run_command' && typeof args.command === 'string') {
    return h('pre.cmd.prompt', clip(args.command, maxArgs)[0]);
  }
  if (tool === 'finish' && typeof args.summary === 'string') return prose(args.summary);
  if (typeof args.path === 'string' && Object.keys(args).length <= 2 && !args.content) {
    return h('pre.cmd', args.path);
  }
  const json = JSON.stringify(args, null, 2);
  const [shown, cut] = clip(json, maxArgs);
  return h('pre.cmd', shown + (cut ? '\n… ' + num(cut) + ' more characters' : ''));
}

// actionView shows an approval's action: "TOOL {json args}" as the tool
// and its arguments, anything else as it is.
export function actionView(action) {
  const m = /^([a-z][a-z0-9_]*) (\{[\s\S]*\})$/.exec(action || '');
  if (m) {
    try {
      return h('div', h('div.mono.small.muted', m[1]), argsView(m[1], JSON.parse(m[2])));
    } catch {
      // not JSON after all
    }
  }
  return h('pre.cmd', clip(action || '', maxArgs)[0]);
}
