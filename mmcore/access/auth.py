"""Who is using the dashboard: sign-in modes, the identity of a browser session and its role.

`MINIMIND_AUTH` chooses how a browser session gets its identity (docs/SECURITY.md has example
configurations):

- `local` (default): the OS user running the dashboard, for requests from this machine only; a
  request from another address gets an explanation page and nothing else. `.streamlit/config.toml`
  binds the server to 127.0.0.1, so the README's commands work as before and nobody else can connect.
- `oidc`: Streamlit's native sign-in (`st.login`) with an OpenID Connect provider configured in
  `.streamlit/secrets.toml` ([auth]); the identity is the signed-in e-mail address when the provider
  marks it verified (`email_verified` true), else the account's subject qualified by its issuer
  (`oidc:<iss>#<sub>`, which matches no e-mail address or OS user in roles.toml); see `oidc_identity`.
- `proxy`: a trusted reverse proxy in front of the dashboard signs people in and sets a header
  (`MINIMIND_AUTH_HEADER`, default `X-Forwarded-Email`); a request without it gets nothing. Only the
  proxy may be able to reach the dashboard (bind it to 127.0.0.1 or a private interface).
- `readonly`: an explicit opt-out for a trusted network: visitors from other machines are
  "anonymous" viewers (read only); requests from this machine are the OS user.

The role of an identity comes from `mmcore.access.roles`. `decide` is the whole rule as a pure function;
`gate` applies it to the current Streamlit session.
"""
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass

from mmcore.access import roles

MODES = ("local", "oidc", "proxy", "readonly")
MODE_ENV = "MINIMIND_AUTH"
HEADER_ENV = "MINIMIND_AUTH_HEADER"
DEFAULT_HEADER = "X-Forwarded-Email"
ANONYMOUS = "anonymous"
USER_KEY = "auth.user"
ROLE_KEY = "auth.role"


@dataclass(frozen=True)
class Access:
    """The outcome for one request: an identity and its role, or why there is none (and whether a
    sign-in button helps)."""
    user: str | None
    role: str | None = None
    reason: str = ""
    can_sign_in: bool = False


def mode():
    value = (os.environ.get(MODE_ENV) or "local").strip().lower()
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


def header_name():
    return os.environ.get(HEADER_ENV) or DEFAULT_HEADER


def is_loopback(address):
    """True for 127.0.0.0/8 and ::1. Streamlit gives None for a connection from this machine; a value
    that is no address at all (a test harness's stand-in) counts as local too."""
    if not address or not isinstance(address, str):
        return True
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _verified(value):
    """`email_verified` as providers send it: JSON true, or (Cognito and a few others) the string "true"."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def oidc_identity(claims):
    """The identity of an OpenID Connect account from its ID-token claims (`st.user`), or None.

    The e-mail address only when the provider vouches for it (`email_verified` true): an account whose
    unverified `email` claim says "alice@example.com" must not act as Alice. Otherwise the provider's
    stable subject, qualified by its issuer: `oidc:<iss>#<sub>`. That is no e-mail address and no OS
    user name (neither holds ":" and "#" like this), so it gets the `default` role unless an admin
    lists it in roles.toml by that name.
    """
    if not claims:
        return None
    email = claims.get("email")
    if isinstance(email, str) and email.strip() and _verified(claims.get("email_verified")):
        return email.strip()
    sub = claims.get("sub")
    if sub is None or not str(sub).strip():
        return None
    return f"oidc:{str(claims.get('iss') or '').strip()}#{str(sub).strip()}"


def decide(auth_mode, client_ip, headers, signed_in, os_user, config=None):
    """The identity and role of a request, or the reason it gets none (see the module docstring).

    `signed_in` (oidc mode): the signed-in account's claims (a mapping, see `oidc_identity`), or an
    identity already taken from them; None when nobody is signed in."""
    local = is_loopback(client_ip)
    if auth_mode == "local":
        if not local:
            return Access(None, reason=(
                "This dashboard is served without sign-in, so it only answers requests from the machine it "
                "runs on. To share it with a team, its administrator sets up sign-in (OpenID Connect or a "
                "sign-in proxy): see docs/SECURITY.md."))
        user = os_user
    elif auth_mode == "readonly":
        if not local:
            return Access(ANONYMOUS, "viewer")
        user = os_user
    elif auth_mode == "proxy":
        wanted = header_name().lower()
        user = next((v for k, v in (headers or {}).items() if k.lower() == wanted and v and v.strip()), None)
        if user is None:
            return Access(None, reason=(f"No signed-in identity came with this request (the {header_name()} header "
                                        f"a sign-in proxy sets). Open the dashboard through its sign-in address."))
        user = user.strip()
    elif auth_mode == "oidc":
        if not signed_in:
            return Access(None, reason="Sign in to use the MiniMind Train Dashboard.", can_sign_in=True)
        user = oidc_identity(signed_in) if isinstance(signed_in, Mapping) else signed_in
        if not user:
            return Access(None, reason=(
                "Your sign-in provider gave neither a verified e-mail address nor an account subject for this "
                "account, so the dashboard cannot tell who you are. Ask its administrator (see docs/SECURITY.md)."))
    else:
        raise ValueError(f"unknown sign-in mode {auth_mode!r}")
    return Access(user, roles.role_of(user, config))


def gate(st):
    """Apply `decide` to the current session: returns an Access with an identity, or draws the
    explanation (with a sign-in button where one helps) and returns the refusing Access."""
    auth_mode = mode()
    claims = None
    if auth_mode == "oidc":
        try:
            if st.user.is_logged_in:
                claims = {key: st.user.get(key) for key in ("email", "email_verified", "sub", "iss")}
        except Exception:  # no [auth] section in secrets.toml: nobody can sign in
            claims = None
    try:
        headers = dict(st.context.headers)
    except Exception:
        headers = {}
    access = decide(auth_mode, st.context.ip_address, headers, claims, roles.os_user())
    st.session_state[USER_KEY] = access.user
    st.session_state[ROLE_KEY] = access.role
    return access


def session_user(state):
    """The identity the entry script stored for this session ("anonymous", a viewer, when there is none)."""
    return state.get(USER_KEY) or ANONYMOUS


def session_role(state):
    """The role the entry script stored for this session ("viewer" when there is none)."""
    return state.get(ROLE_KEY) or "viewer"
