// The OpenID provider of the identity tests (the `oidc-provider` package), on a loopback port
// of its own. Prints one JSON line {"issuer": ...} once it listens; stops when stdin closes.
//
// Clients (secret "<client id>-secret", client_secret_basic or _post):
//   bridge-cc      client credentials; JWT access tokens for any resource it asks for
//   bridge-opaque  client credentials; opaque access tokens (read back through introspection)
//   bridge-rs      the bridge itself, as a resource server calling the introspection endpoint
// A token request may pass `groups=a,b`: the access token then carries {"groups": ["a", "b"]}.
// POST /test/rotate puts a new signing key in front of the old ones (key rotation without a
// restart: the same issuer, a new `kid`).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const SCOPES = 'tools admin';

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), use: 'sig', alg: 'RS256' };
}

function client(id, extra = {}) {
  return {
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: SCOPES,
    ...extra,
  };
}

function makeProvider(issuer, keys) {
  const provider = new Provider(issuer, {
    clients: [client('bridge-cc'), client('bridge-opaque'), client('bridge-rs')],
    jwks: { keys },
    scopes: ['openid', 'tools', 'admin'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true, allowedPolicy: async () => true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resourceIndicator, c) => ({
          scope: SCOPES,
          audience: resourceIndicator,
          accessTokenTTL: 300,
          accessTokenFormat: c.clientId === 'bridge-opaque' ? 'opaque' : 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    extraTokenClaims: (ctx) => {
      const groups = ctx.oidc.body?.groups;
      return groups ? { groups: String(groups).split(',') } : undefined;
    },
  });
  provider.on('server_error', (ctx, err) => console.error('provider error:', err));
  return provider;
}

const keys = [signingKey()];
let handler = null;
const server = createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/test/rotate') {
    keys.unshift(signingKey());
    handler = makeProvider(issuer, keys).callback();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: keys[0].kid }));
    return;
  }
  handler(req, res);
});
let issuer = '';
server.listen(0, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  handler = makeProvider(issuer, keys).callback();
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
