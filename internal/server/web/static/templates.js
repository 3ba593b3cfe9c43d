// Templates: the tenant's environment templates (latest version of each);
// Enter or a click shows a template's versions.

import {h} from './dom.js';
import {versionedPage} from './versioned.js';

// shortImage is an image reference with its digest cut to 12 hex digits.
function shortImage(image) {
  const at = image.lastIndexOf('@');
  return at < 0 ? image : image.slice(0, at + 1) + image.slice(at + 1).replace('sha256:', '').slice(0, 12);
}

export function templatesPage(main) {
  return versionedPage(main, {
    title: 'Templates', noun: 'templates', path: '/v1/templates', key: 'templates', attr: 'template',
    column: 'Image', cell: (v) => h('span.id', {title: v.image}, shortImage(v.image)),
    emptyTitle: 'No templates',
    empty: ['Store one with ', h('code', 'POST /v1/templates/NAME'), ' or ', h('code', 'airlock template create'), '.'],
  });
}
