import './style.css';
import { ApiError, getKey, me, setKey, whenUnauthorized } from './api';
import { clear, h } from './dom';
import { current, go } from './router';
import { can, session } from './session';
import { errorBox } from './ui';
import type { Page } from './pages/page';
import { signinPage } from './pages/signin';
import { runsPage } from './pages/runs';
import { runPage } from './pages/run';
import { timelinePage } from './pages/timeline';
import { comparePage } from './pages/compare';
import { tenantsPage, tenantPage } from './pages/tenants';
import { pluginsPage } from './pages/plugins';
import { keysPage } from './pages/keys';
import { auditPage } from './pages/audit';
import { benchPage } from './pages/bench';
import { pluginPage } from './pages/plugin';
import { setZone, zone, zoneLabel } from './prefs';
import { announceSignOut, askKey, serveKey } from './tabs';
import { loading } from './ui';

const root = document.getElementById('app')!;
let cleanups: (() => void)[] = [];
let signinNotice = '';

/** Where a signed-out user was going: sign-in carries it and returns there. */
function signinWithNext(): string {
  const here = location.hash.replace(/^#/, '');
  const next = here && !here.startsWith('/signin') ? here : '';
  return next ? `/signin?next=${encodeURIComponent(next)}` : '/signin';
}

whenUnauthorized(() => {
  // An expired or revoked key: drop it and say why on the sign-in page.
  setKey(null);
  session.me = null;
  signinNotice = 'Your API key was rejected: it has expired or been revoked. Sign in with a valid key.';
  go(signinWithNext());
});

serveKey(getKey, () => {
  // Another tab signed out: so does this one.
  setKey(null);
  session.me = null;
  go('/signin');
});

function nav(): HTMLElement {
  const r = current().path[0] ?? '';
  const item = (path: string, label: string) =>
    h('a', { href: `#/${path}`, class: r === path ? 'active' : '', 'aria-current': r === path ? 'page' : null }, label);
  const m = session.me!;
  // On a narrow screen the links fold behind a menu button (closed by Escape, a pick or a
  // click elsewhere); from 760 px up they are all in the bar.
  const toggle = h('button', { type: 'button', class: 'btn btn-quiet nav-toggle', 'aria-expanded': 'false', 'aria-controls': 'main-nav',
    onclick: () => setOpen(toggle.getAttribute('aria-expanded') !== 'true') }, h('span', { 'aria-hidden': 'true' }, '☰'), ' Menu');
  const setOpen = (open: boolean) => {
    toggle.setAttribute('aria-expanded', String(open));
    header.classList.toggle('nav-open', open);
  };
  const zoneBtn = h('button', { type: 'button', class: 'btn btn-quiet btn-small', 'data-testid': 'zone-toggle',
    title: 'Show times in UTC or in this browser’s time zone', 'aria-label': `Times shown in ${zoneLabel()}; switch`,
    onclick: () => { setZone(zone() === 'utc' ? 'local' : 'utc'); void render(); } }, zone() === 'utc' ? 'UTC' : 'Local time');
  const header: HTMLElement = h('header', { class: 'top' },
    h('a', { class: 'brand', href: '#/' }, 'SliceScheduler'),
    toggle,
    h('nav', { 'aria-label': 'Main', id: 'main-nav', onclick: (e: Event) => { if ((e.target as Element).closest('a')) setOpen(false); } },
      can('runs.read') ? item('runs', 'Runs') : null,
      can('runs.read') ? item('compare', 'Compare') : null,
      can('tenants.list') ? item('tenants', 'Tenants') : null,
      can('tenant.own') ? h('a', { href: `#/tenants/${m.tenant_id}`, class: r === 'tenants' ? 'active' : '' }, 'My tenant') : null,
      can('plugins.read') ? item('plugins', 'Plugins') : null,
      can('keys.create') ? item('keys', 'Keys') : null,
      can('audit.read') ? item('audit', 'Audit') : null),
    h('div', { class: 'who' },
      zoneBtn,
      h('span', { class: `role role-${m.role}`, 'data-role': m.role }, m.role),
      h('span', { class: 'name' }, m.name),
      h('button', { class: 'btn btn-quiet', onclick: signOut }, 'Sign out')));
  header.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && header.classList.contains('nav-open')) { setOpen(false); toggle.focus(); }
  });
  return header;
}

function signOut(): void {
  setKey(null);
  session.me = null;
  announceSignOut();
  go('/signin');
}

/** The tab's title names the page (and the thing on it), so tabs and history read apart. */
function title(path: string[]): string {
  const [a, b, c] = path;
  const id = b ? ` ${b.length > 12 ? `#${b.slice(0, 8)}` : b}` : '';
  const q = current().query;
  const t = a === 'runs' && b && c === 'timeline' ? `Timeline of run${id}`
    : a === 'runs' && b ? `Run${id}`
      : a === 'runs' ? 'Runs'
        : a === 'compare' ? (q.get('runs') ? `Compare ${q.get('runs')!.split(',').length} runs` : q.get('run') ? 'Compare policies (sweep)' : 'Compare')
          : a === 'tenants' && b ? `Tenant${id}`
            : a === 'tenants' ? 'Tenants'
              : a === 'plugins' && b ? `Plugin${id}`
                : a === 'plugins' ? 'Plugins'
                  : a === 'keys' ? 'API keys'
                    : a === 'audit' ? 'Audit log'
                      : a === 'bench' ? 'Timeline benchmark'
                        : a === 'signin' ? 'Sign in' : 'SliceScheduler';
  return t === 'SliceScheduler' ? t : `${t} · SliceScheduler`;
}

/** Global keys: Escape closes whatever popover is open (menus, forms in <details>, tips). */
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape') return;
  for (const d of document.querySelectorAll<HTMLDetailsElement>('details.new-run[open], details.popover[open]')) {
    d.open = false;
    d.querySelector('summary')?.focus();
  }
  document.querySelectorAll<HTMLElement>('.tooltip:not([hidden]), .readout:not([hidden])').forEach((t) => { t.hidden = true; });
});

function home(): string {
  if (can('runs.read')) return '/runs';
  if (can('tenant.own')) return `/tenants/${session.me!.tenant_id}`;
  return '/signin';
}

/** The page of a route, or null when there is none or the role may not see it (then home). */
function pick(path: string[]): Page | null {
  const [a, b, c] = path;
  const runs = can('runs.read');
  if (a === 'runs' && b && c === 'timeline') return runs ? timelinePage : null;
  if (a === 'runs' && b) return runs ? runPage : null;
  if (a === 'runs') return runs ? runsPage : null;
  if (a === 'compare') return runs ? comparePage : null;
  if (a === 'tenants' && b) return can('tenants.list') || String(session.me?.tenant_id) === b ? tenantPage : null;
  if (a === 'tenants') return can('tenants.list') ? tenantsPage : null;
  if (a === 'plugins' && b) return can('plugins.read') ? pluginPage : null;
  if (a === 'plugins') return can('plugins.read') ? pluginsPage : null;
  if (a === 'keys') return can('keys.create') ? keysPage : null;
  if (a === 'audit') return can('audit.read') ? auditPage : null;
  return null;
}

async function render(): Promise<void> {
  cleanups.forEach((f) => f());
  cleanups = [];
  const route = current();
  document.title = title(route.path);
  if (route.path[0] === 'bench') {
    // The synthetic timeline benchmark needs no key: it never calls the API.
    return mount(null, benchPage, route);
  }
  // A new tab has no key of its own: another open tab of the app may lend it.
  if (!session.me && !getKey() && route.path[0] !== 'signin') {
    const lent = await askKey();
    if (lent) setKey(lent);
  }
  if (!session.me && getKey()) {
    try {
      session.me = await me();
    } catch (e) {
      if (e instanceof ApiError && e.unreachable) {
        clear(root);
        root.append(h('main', { class: 'main' }, errorBox(e, () => void render())));
        return;
      }
      setKey(null);
    }
  }
  if (!session.me || route.path[0] === 'signin') {
    // A deep link survives sign-in: the sign-in route carries it as `next`.
    const next = route.path[0] === 'signin' ? route.query.get('next') : location.hash.replace(/^#/, '');
    const after = () => (next && next.startsWith('/') && !next.startsWith('/signin') ? next : home());
    if (session.me && route.path[0] === 'signin') return go(after());
    if (route.path[0] !== 'signin') return go(signinWithNext());
    const notice = signinNotice;
    signinNotice = '';
    return mount(null, signinPage(notice, async (key) => {
      session.me = await me(key);
      setKey(key);
      go(after());
    }), route);
  }
  const page = pick(route.path);
  if (!page) return go(home());
  mount(nav(), page, route);
}

function mount(header: HTMLElement | null, page: Page, route: ReturnType<typeof current>): void {
  clear(root);
  const main = h('main', { class: 'main', id: 'main' });
  if (header) root.append(h('a', { class: 'skip', href: '#main', onclick: (e: Event) => { e.preventDefault(); main.focus(); } }, 'Skip to content'), header);
  root.append(main);
  main.tabIndex = -1;
  const ctx = { route, onLeave: (f: () => void) => cleanups.push(f) };
  // Until the page has loaded what it shows first, say that it is loading (below what
  // it already drew, such as its heading).
  const wait = loading();
  const result = page(main, ctx);
  if (!(result instanceof Promise)) return focusPage(main);
  main.append(wait);
  result.catch((e) => {
    clear(main);
    main.append(errorBox(e, () => void render()));
  }).finally(() => {
    wait.remove();
    focusPage(main);
  });
}

/** After a navigation, focus goes to the new page's heading (screen readers announce it;
 *  the next Tab starts in the page, not at the top of the document). */
let first = true;
function focusPage(main: HTMLElement): void {
  if (first) { first = false; if (!main.querySelector('#api-key')) return; }
  if (document.activeElement && document.activeElement !== document.body && main.contains(document.activeElement)) return;
  const h1 = main.querySelector('h1');
  const target = (h1 ?? main) as HTMLElement;
  if (target !== main) target.tabIndex = -1;
  target.focus({ preventScroll: true });
}

window.addEventListener('hashchange', () => void render());
void render();
