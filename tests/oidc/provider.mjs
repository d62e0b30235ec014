// A real OpenID Connect provider (panva/oidc-provider) for the test suite and local development.
// Listens on 127.0.0.1 only; the issuer is http://127.0.0.1:<port>. Not for production use.
//
// Environment:
//   OIDC_PORT                  port to listen on (or the first argument); required
//   OIDC_KEYS_FILE             private JWKS ({"keys": [...]}) to sign with; the first RS256 key signs.
//                              Re-read by POST /__admin/reload-keys. Default: one fresh RSA key.
//   OIDC_ADMIN_TOKEN           enables POST /__admin/reload-keys when the request sends
//                              "Authorization: Bearer <this value>"; unset = no admin endpoint
//   OIDC_AUDIENCE              audience of access tokens (default "recovery")
//   OIDC_RESOURCE              resource indicator (RFC 8707) mapped to that audience (default "urn:recovery")
//   OIDC_REDIRECT_URIS         comma-separated redirect URIs of the dashboard client
//                              (default http://127.0.0.1:8000/dashboard/auth/callback)
//   OIDC_POST_LOGOUT_REDIRECT_URIS  comma-separated (default: the redirect URIs' origins + "/dashboard")
//   OIDC_DASHBOARD_CLIENT_ID   (default "recovery-dashboard")
//   OIDC_DASHBOARD_CLIENT_SECRET  empty = public client (PKCE only), else client_secret_basic
//   OIDC_TOKEN_TTL             access token lifetime in seconds (default 600)

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';

import Provider, { errors, interactionPolicy } from 'oidc-provider';

const port = Number(process.env.OIDC_PORT || process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: OIDC_PORT=<port> node provider.mjs  (or node provider.mjs <port>)');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const audience = process.env.OIDC_AUDIENCE || 'recovery';
const resource = process.env.OIDC_RESOURCE || 'urn:recovery';
const tokenTtl = Number(process.env.OIDC_TOKEN_TTL || 600);
const list = (value) => (value || '').split(',').map((s) => s.trim()).filter(Boolean);
const redirectUris = list(process.env.OIDC_REDIRECT_URIS);
if (!redirectUris.length) redirectUris.push('http://127.0.0.1:8000/dashboard/auth/callback');
const postLogoutRedirectUris = list(process.env.OIDC_POST_LOGOUT_REDIRECT_URIS);
if (!postLogoutRedirectUris.length) {
  for (const uri of redirectUris) postLogoutRedirectUris.push(`${new URL(uri).origin}/dashboard`);
}
const dashboardClientId = process.env.OIDC_DASHBOARD_CLIENT_ID || 'recovery-dashboard';
const dashboardSecret = process.env.OIDC_DASHBOARD_CLIENT_SECRET || '';

// Roles of the machine clients (client_credentials); interactive users get theirs from the username.
const CLIENT_ROLES = {
  'viewer-client': ['viewer'],
  'operator-client': ['operator'],
  'norole-client': [],
};
const CLIENT_SECRETS = {
  'viewer-client': 'viewer-secret',
  'operator-client': 'operator-secret',
  'norole-client': 'norole-secret',
};
const rolesOfAccount = (accountId) => (accountId.startsWith('operator') ? ['operator'] : ['viewer']);
const profileOfAccount = (accountId) => ({
  name: accountId,
  preferred_username: accountId,
  email: `${accountId}@example.test`,
  roles: rolesOfAccount(accountId),
});

// A loopback http redirect URI lets the client be "native", and oidc-provider then accepts any port
// on it (RFC 8252 §7.3) -- handy for test servers on random ports.
const allLoopback = redirectUris.every((uri) => {
  const { protocol, hostname } = new URL(uri);
  return protocol === 'http:' && ['127.0.0.1', '[::1]', 'localhost'].includes(hostname);
});

function loadKeys() {
  if (process.env.OIDC_KEYS_FILE) {
    const { keys } = JSON.parse(fs.readFileSync(process.env.OIDC_KEYS_FILE, 'utf8'));
    if (!Array.isArray(keys) || !keys.length) throw new Error(`${process.env.OIDC_KEYS_FILE} has no keys`);
    return keys;
  }
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return [{ ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), alg: 'RS256', use: 'sig' }];
}

function isFirstParty(client) {
  return client.clientId === dashboardClientId;
}

// oidc-provider asks every native client for consent; the dashboard is first party, so it should not.
function interactionsPolicy() {
  const policy = interactionPolicy.base();
  policy.get('consent').checks.remove('native_client_prompt');
  return policy;
}

function configuration(keys) {
  return {
    clients: [
      {
        client_id: dashboardClientId,
        ...(dashboardSecret
          ? { client_secret: dashboardSecret, token_endpoint_auth_method: 'client_secret_basic' }
          : { token_endpoint_auth_method: 'none' }),
        application_type: allLoopback ? 'native' : 'web',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: redirectUris,
        post_logout_redirect_uris: postLogoutRedirectUris,
      },
      ...Object.keys(CLIENT_ROLES).map((clientId) => ({
        client_id: clientId,
        client_secret: CLIENT_SECRETS[clientId],
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: 'client_secret_basic',
      })),
    ],
    jwks: { keys },
    cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
    pkce: { required: () => true },
    interactions: { policy: interactionsPolicy() },
    scopes: ['openid', 'offline_access', 'profile', 'email', 'roles'],
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email'],
      roles: ['roles'],
    },
    ttl: {
      AccessToken: tokenTtl,
      ClientCredentials: tokenTtl,
      IdToken: tokenTtl,
      Interaction: 600,
      Grant: 3600,
      Session: 3600,
      AuthorizationCode: 60,
      RefreshToken: 3600,
    },
    async findAccount(_ctx, accountId) {
      return {
        accountId,
        async claims() {
          return { sub: accountId, ...profileOfAccount(accountId) };
        },
      };
    },
    // The dashboard is first party: log in without a consent screen.
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      if (!isFirstParty(ctx.oidc.client)) return undefined;
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope('openid profile email roles offline_access');
      grant.addOIDCClaims(['sub', 'name', 'preferred_username', 'email', 'roles']);
      grant.addResourceScope(resource, 'recovery');
      await grant.save();
      return grant;
    },
    // Access tokens for our API carry the roles (and, for people, who they are).
    async extraTokenClaims(_ctx, token) {
      if (token.accountId) return profileOfAccount(token.accountId);
      if (token.clientId in CLIENT_ROLES) return { roles: CLIENT_ROLES[token.clientId] };
      return undefined;
    },
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // Every token is for our API unless another resource is asked for, so that the
        // authorization code flow yields a JWT access token without a `resource` parameter.
        defaultResource: async (_ctx, _client, oneOf) => oneOf || resource,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, indicator) => {
          if (indicator !== resource) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
          return {
            scope: 'recovery',
            audience,
            accessTokenTTL: tokenTtl,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
  };
}

function build(keys) {
  const provider = new Provider(issuer, configuration(keys));
  return { provider, handler: provider.callback() };
}

let current = build(loadKeys());

function answer(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

// Key rotation for tests: swap in a provider built from the re-read keys file. Grants and sessions
// live in oidc-provider's module-level memory adapter, so they survive the swap.
function admin(req, res) {
  const expected = process.env.OIDC_ADMIN_TOKEN;
  const given = req.headers.authorization || '';
  if (!expected || req.method !== 'POST' || req.url !== '/__admin/reload-keys') {
    return answer(res, 404, { error: 'not_found' });
  }
  const a = Buffer.from(given);
  const b = Buffer.from(`Bearer ${expected}`);
  if (a.length !== b.length || !crypto.timingSafeEqual(a, b)) {
    return answer(res, 401, { error: 'unauthorized' });
  }
  try {
    const keys = loadKeys();
    current = build(keys);
    console.log(`reloaded keys: ${keys.map((k) => k.kid).join(', ')}`);
    return answer(res, 200, { kids: keys.map((k) => k.kid) });
  } catch (err) {
    return answer(res, 500, { error: String(err) });
  }
}

const server = http.createServer((req, res) => {
  if (req.url.startsWith('/__admin/')) return admin(req, res);
  return current.handler(req, res);
});

server.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening, issuer ${issuer}, audience ${audience}, redirect URIs ${redirectUris.join(' ')}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  });
}
