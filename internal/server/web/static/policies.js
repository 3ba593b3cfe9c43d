// Policies: the tenant's stored policies (latest version of each); Enter
// or a click shows a policy's versions.

import {h} from './dom.js';
import {versionedPage} from './versioned.js';

export function policiesPage(main) {
  return versionedPage(main, {
    title: 'Policies', noun: 'policies', path: '/v1/policies', key: 'policies', attr: 'policy',
    column: 'Hash', cell: (v) => h('span.id', {title: v.hash}, v.hash.slice(0, 12)),
    emptyTitle: 'No stored policies',
    empty: ['Store one with ', h('code', 'POST /v1/policies/NAME'), ' or ', h('code', 'airlock policy put'), '.'],
  });
}
