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

const root = document.getElementById('app')!;
let cleanups: (() => void)[] = [];
let signinNotice = '';

whenUnauthorized(() => {
  // An expired or revoked key: drop it and say why on the sign-in page.
  setKey(null);
  session.me = null;
  signinNotice = 'Your API key was rejected: it has expired or been revoked. Sign in with a valid key.';
  go('/signin');
});

function nav(): HTMLElement {
  const r = current().path[0] ?? '';
  const item = (path: string, label: string) =>
    h('a', { href: `#/${path}`, class: r === path ? 'active' : '', 'aria-current': r === path ? 'page' : null }, label);
  const m = session.me!;
  return h('header', { class: 'top' },
    h('a', { class: 'brand', href: '#/' }, 'SliceScheduler'),
    h('nav', { 'aria-label': 'Main' },
      can('runs.read') ? item('runs', 'Runs') : null,
      can('runs.read') ? item('compare', 'Compare') : null,
      can('tenants.list') ? item('tenants', 'Tenants') : null,
      can('tenant.own') ? h('a', { href: `#/tenants/${m.tenant_id}`, class: r === 'tenants' ? 'active' : '' }, 'My tenant') : null,
      can('plugins.read') ? item('plugins', 'Plugins') : null,
      can('keys.create') ? item('keys', 'Keys') : null,
      can('audit.read') ? item('audit', 'Audit') : null),
    h('div', { class: 'who' },
      h('span', { class: `role role-${m.role}`, 'data-role': m.role }, m.role),
      h('span', { class: 'name' }, m.name),
      h('button', { class: 'btn btn-quiet', onclick: signOut }, 'Sign out')));
}

function signOut(): void {
  setKey(null);
  session.me = null;
  go('/signin');
}

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
  if (a === 'plugins') return can('plugins.read') ? pluginsPage : null;
  if (a === 'keys') return can('keys.create') ? keysPage : null;
  if (a === 'audit') return can('audit.read') ? auditPage : null;
  return null;
}

async function render(): Promise<void> {
  cleanups.forEach((f) => f());
  cleanups = [];
  const route = current();
  if (route.path[0] === 'bench') {
    // The synthetic timeline benchmark needs no key: it never calls the API.
    return mount(null, benchPage, route);
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
    if (session.me && route.path[0] === 'signin') return go(home());
    const notice = signinNotice;
    signinNotice = '';
    return mount(null, signinPage(notice, async (key) => {
      session.me = await me(key);
      setKey(key);
      go(home());
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
  Promise.resolve(page(main, ctx)).catch((e) => {
    clear(main);
    main.append(errorBox(e, () => void render()));
  });
}

window.addEventListener('hashchange', () => void render());
void render();
