// A real OpenID Connect provider for Ackboard's SSO tests: panva's oidc-provider, the
// certified reference implementation, on loopback, with its own login and consent pages
// (devInteractions: any password is accepted for a known user).
//
//   node provider.mjs <port> <redirect_uri> <client_id> <client_secret>
//
// Users and their groups live in memory. Two test-only routes beside the protocol:
//   POST /_test/groups?user=<login>&groups=a,b   the admin changes a user's groups
//   (the login "late"):  its token answer is held back past the ID token's 1 s lifetime,
//   so the ID token is expired when Ackboard reads it.
// Prints "ready" on stdout once it listens.
import Provider from 'oidc-provider';

const [port, redirectUri, clientId, clientSecret] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const users = {
  olivia: { email: 'olivia@example.com', name: 'Olivia Operator', groups: ['ackboard-operators'] },
  victor: { email: 'victor@example.com', name: 'Victor Viewer', groups: ['ackboard-viewers'] },
  nora: { email: 'nora@example.com', name: 'Nora Nobody', groups: ['marketing'] },
  late: { email: 'late@example.com', name: 'Late Lee', groups: ['ackboard-operators'] },
};

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
    id_token_signed_response_alg: 'RS256',
  }],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
  cookies: { keys: ['ackboard-test-provider-cookie-key'] },
  ttl: {
    IdToken: (ctx, token) => (token.available.sub === 'late' ? 1 : 3600),
  },
  async findAccount(ctx, id) {
    const user = users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: user.email,
          email_verified: true,
          name: user.name,
          preferred_username: id,
          groups: [...user.groups],
        };
      },
    };
  },
});
provider.proxy = false;

provider.use(async (ctx, next) => {
  if (ctx.path === '/_test/groups' && ctx.method === 'POST') {
    const user = users[ctx.query.user];
    if (!user) { ctx.status = 404; return; }
    user.groups = String(ctx.query.groups || '').split(',').filter(Boolean);
    ctx.status = 204;
    return;
  }
  await next();
  if (ctx.path === '/token' && ctx.body && ctx.body.id_token) {
    const claims = JSON.parse(Buffer.from(ctx.body.id_token.split('.')[1], 'base64url'));
    if (claims.sub === 'late') await new Promise((resolve) => { setTimeout(resolve, 2100); });
  }
});

provider.listen(Number(port), '127.0.0.1', () => { console.log('ready'); });
