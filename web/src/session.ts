// Who is signed in, and what their role may do. The UI hides what a role may not do;
// the server still checks every call, so this is convenience, not security.

import type { Me, Role } from './types';

export const session: { me: Me | null } = { me: null };

export type Action =
  | 'runs.read' | 'runs.start' | 'runs.cancel'
  | 'tenants.list' | 'tenants.create' | 'tenant.own' | 'sla.edit'
  | 'plugins.read' | 'plugins.manage' | 'keys.create' | 'keys.revoke' | 'audit.read' | 'tenants.remove';

const GRANTS: Record<Role, Action[]> = {
  admin: ['runs.read', 'runs.start', 'runs.cancel', 'tenants.list', 'tenants.create', 'sla.edit', 'plugins.read',
    'plugins.manage', 'keys.create', 'keys.revoke', 'audit.read', 'tenants.remove'],
  analyst: ['runs.read', 'tenants.list', 'plugins.read'],
  tenant: ['tenant.own', 'sla.edit'],
};

export function can(a: Action): boolean {
  return !!session.me && GRANTS[session.me.role].includes(a);
}
