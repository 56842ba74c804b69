// The OpenID provider of the identity tests (the `oidc-provider` package), on a loopback port
// of its own. Prints one JSON line {"issuer": ...} once it listens; stops when stdin closes.
//
// Clients (secret "<client id>-secret", client_secret_basic or _post):
//   bridge-cc      client credentials; JWT access tokens for any resource it asks for
//   bridge-cc2     the same, another subject
//   bridge-opaque  client credentials; opaque access tokens (read back through introspection)
//   bridge-rs      the bridge itself, as a resource server calling the introspection endpoint;
//                  it may also exchange tokens (RFC 8693, below), and sign users in (authorization
//                  code, redirect URI http://127.0.0.1/oauth/signed-in on any loopback port)
// A token request may pass `groups=a,b`: the access token then carries {"groups": ["a", "b"]}.
// RFC 8693 token exchange (oidc-provider has no such grant: it is registered here): a client
// with the grant posts an access token of this provider as `subject_token` and the upstream as
// `audience` (or `resource`); it gets a JWT for that audience, signed with the provider's key,
// with the subject's `sub` and `groups` and the exchanging client as `act`. The audience
// `https://refused.test` is refused (invalid_target). GET /test/exchanges counts the exchanges.
// vendor-app is a vendor's application the bridge connects users' accounts with: authorization
// code with PKCE, refresh tokens, a native client (so that any loopback port of the redirect URI
// http://127.0.0.1/oauth/callback is accepted, RFC 8252). Its login and consent are driven over
// HTTP: GET /interaction/<uid> says the prompt; POST /interaction/<uid>/login with `login=<name>`
// signs that account in; POST /interaction/<uid>/confirm grants what the client asked for.
// POST /test/rotate puts a new signing key in front of the old ones (key rotation without a
// restart: the same issuer, a new `kid`).
import {
  createPrivateKey, createPublicKey, generateKeyPairSync, randomUUID, sign, verify,
} from 'node:crypto';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const SCOPES = 'tools admin';
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
let exchanges = 0;

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
    clients: [
      client('bridge-cc'),
      client('bridge-cc2'),
      client('vendor-app', {
        application_type: 'native',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: ['http://127.0.0.1/oauth/callback'],
        scope: `openid ${SCOPES}`,
      }),
      client('bridge-opaque'),
      client('bridge-rs', {
        application_type: 'native',
        grant_types: ['client_credentials', TOKEN_EXCHANGE, 'authorization_code'],
        response_types: ['code'],
        redirect_uris: ['http://127.0.0.1/oauth/signed-in'],
        scope: `openid ${SCOPES}`,
      }),
    ],
    jwks: { keys },
    findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
    issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
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
  provider.registerGrantType(
    TOKEN_EXCHANGE,
    (ctx) => tokenExchange(ctx, issuer, keys),
    ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope'],
  );
  return provider;
}

const b64url = (data) => Buffer.from(data).toString('base64url');

function signed(claims, key) {
  const header = b64url(JSON.stringify({ alg: 'RS256', typ: 'at+jwt', kid: key.kid }));
  const input = `${header}.${b64url(JSON.stringify(claims))}`;
  return `${input}.${b64url(sign('sha256', Buffer.from(input), createPrivateKey({ key, format: 'jwk' })))}`;
}

function verified(token, issuer, keys) {
  const [header, payload, signature] = String(token).split('.');
  if (!signature) return null;
  const { kid } = JSON.parse(Buffer.from(header, 'base64url'));
  const key = keys.find((k) => k.kid === kid);
  if (!key) return null;
  const { d, p, q, dp, dq, qi, ...pub } = key;
  const ok = verify('sha256', Buffer.from(`${header}.${payload}`), createPublicKey({ key: pub, format: 'jwk' }),
    Buffer.from(signature, 'base64url'));
  const claims = ok ? JSON.parse(Buffer.from(payload, 'base64url')) : null;
  return claims && claims.iss === issuer && claims.exp > Date.now() / 1000 ? claims : null;
}

function tokenExchange(ctx, issuer, keys) {
  const { params, client } = ctx.oidc;
  const refuse = (error, description) => {
    ctx.status = 400;
    ctx.body = { error, error_description: description };
  };
  if (params.subject_token_type !== ACCESS_TOKEN) return refuse('invalid_request', 'subject_token_type');
  const subject = verified(params.subject_token, issuer, keys);
  if (!subject) return refuse('invalid_grant', 'the subject token is not valid');
  const audience = params.audience || params.resource;
  if (!audience || audience === 'https://refused.test') return refuse('invalid_target', 'no such audience');
  exchanges += 1;
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    iss: issuer, sub: subject.sub, aud: audience, client_id: client.clientId, act: { sub: client.clientId },
    scope: params.scope, groups: subject.groups, iat: now, exp: now + 120, jti: randomUUID(),
  };
  ctx.body = {
    access_token: signed(claims, keys[0]), issued_token_type: ACCESS_TOKEN, token_type: 'Bearer', expires_in: 120,
  };
}

async function interact(provider, req, res) {
  const [, , uid, step] = req.url.split('?')[0].split('/');
  const details = await provider.interactionDetails(req, res);
  const reply = (status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (details.uid !== uid) return reply(400, { error: 'another interaction' });
  if (req.method === 'GET' && !step) {
    return reply(200, { uid, prompt: details.prompt.name, client_id: details.params.client_id });
  }
  if (req.method === 'POST' && step === 'login') {
    let body = '';
    for await (const chunk of req) body += chunk;
    const accountId = new URLSearchParams(body).get('login');
    if (!accountId) return reply(400, { error: 'login is required' });
    return provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
  }
  if (req.method === 'POST' && step === 'confirm') {
    const { prompt: { details: missing }, params, session } = details;
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    const grantId = await grant.save();
    const consent = details.grantId ? {} : { grantId };
    return provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
  }
  return reply(404, { error: 'no such step' });
}

const keys = [signingKey()];
let handler = null;
let current = null;
const server = createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interact(current, req, res).catch((err) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: String(err.message || err) }));
    });
    return;
  }
  if (req.method === 'GET' && req.url === '/test/exchanges') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ exchanges }));
    return;
  }
  if (req.method === 'POST' && req.url === '/test/rotate') {
    keys.unshift(signingKey());
    current = makeProvider(issuer, keys);
    handler = current.callback();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: keys[0].kid }));
    return;
  }
  handler(req, res);
});
let issuer = '';
server.listen(0, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  current = makeProvider(issuer, keys);
  handler = current.callback();
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
