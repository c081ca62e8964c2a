"""Who a page acts as: the console's own user, or the cluster user who logged in.

With ``console_access_key`` set the cluster has authentication on, and the console does not lend
its own credentials to whoever reaches it: the login form asks a user of the cluster (RocketMQ
5's ACL 2.0 users), and each login session gets an SDK admin client of its own that signs every
request as that user. The brokers and name servers then decide, by that user's rules, what the
pages show and change; what they refuse shows as a page that says so (NO_PERMISSION), not an
error. The console's own credentials sign what is not any one person's: the runtime sampler
behind the charts, and requests sent with the bearer token (scripts).

The password is checked at login by signed requests (the name server's cluster info, which any
user may read, then one broker's runtime info): the servers' answer says whether the
credentials hold, whatever the user may then do. At most ``console_user_sessions_max`` users are
logged in at once (each client has its own connections): past it the least recently active is
logged out. A session's client is closed when it logs out, when its session expires (swept
every ``SWEEP_INTERVAL_S``) and when the console stops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging

from orbitmq.client import MASTER_ID, AsyncAdmin
from orbitmq.config import ConsoleConfig
from orbitmq.console.security import SessionTable
from orbitmq.errors import AccessDeniedError, ClientError, RemoteProtocolError
from orbitmq.security.model import PASSWORD_MAX_CHARS, check_username
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = ["LoginRefused", "UserSession", "UserSessions", "verify_credentials",
           "SWEEP_INTERVAL_S"]

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 30.0
# How the servers' remark of a refusal starts when the credentials themselves do not hold (an
# authorization refusal says "access denied": the user exists and signed correctly).
AUTHENTICATION_FAILED = "authentication failed"


class LoginRefused(ClientError):
    """The user name or password was refused (the message does not say which)."""


async def verify_credentials(admin: AsyncAdmin) -> None:
    """Whether the cluster accepts ``admin``'s credentials, asked by signed requests.

    Raises:
        LoginRefused: a server refused the credentials (unknown or disabled user, wrong password).
        OrbitMQError / OSError: the cluster did not answer.
    """
    try:
        info = await admin.cluster_info()
        masters = sorted(bd.broker_addrs[MASTER_ID] for bd in info.broker_addr_table.values()
                         if MASTER_ID in bd.broker_addrs)
        if masters:
            await admin.broker_runtime_info(masters[0])
    except AccessDeniedError as e:
        if e.remark.startswith(AUTHENTICATION_FAILED):
            raise LoginRefused("wrong user name or password") from None
        # Refused by the user's rules: the credentials held.


@dataclasses.dataclass
class UserSession:
    """One logged-in user: its name, its client, and the brokers whose runtime info it may read
    (as its last view of the cluster page found)."""

    username: str
    admin: AsyncAdmin
    readable_brokers: frozenset[str] = frozenset()


class UserSessions:
    """The users logged in, by session id (see the module docstring)."""

    def __init__(self, config: ConsoleConfig, sessions: SessionTable) -> None:
        self.config = config
        self.sessions = sessions
        self.users_max = config.console_user_sessions_max
        self._by_sid: collections.OrderedDict[str, UserSession] = collections.OrderedDict()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._by_sid)

    async def log_in(self, username: str, password: object) -> UserSession:
        """A client signing as ``username``, once the cluster accepted the password.

        Raises:
            LoginRefused: a malformed name or password, or the cluster refused them.
            OrbitMQError / OSError: the cluster did not answer.
        """
        try:
            name = check_username(username)
        except RemoteProtocolError:
            raise LoginRefused("wrong user name or password") from None
        if not isinstance(password, str) or not 0 < len(password) <= PASSWORD_MAX_CHARS:
            raise LoginRefused("wrong user name or password")
        admin = AsyncAdmin(self.config.namesrv_addr,
                           timeout=self.config.console_admin_timeout_ms / 1000,
                           credentials=Credentials(name, password),
                           tls=ClientTls.of(self.config) or False)
        try:
            await admin.start()
            await verify_credentials(admin)
        except BaseException:
            await admin.shutdown()
            raise
        return UserSession(name, admin)

    async def bind(self, sid: str, user: UserSession) -> None:
        """``sid`` acts as ``user`` from now on; past the bound, the least recently active
        user is logged out."""
        self._by_sid[sid] = user
        while len(self._by_sid) > self.users_max:
            old_sid, old = self._by_sid.popitem(last=False)
            self.sessions.close(old_sid)
            log.info("console user %s logged out: more than %d users logged in", old.username,
                     self.users_max)
            await old.admin.shutdown()

    def get(self, sid: str | None) -> UserSession | None:
        """The user of an open session (None: no session, or no user bound to it)."""
        if not sid:
            return None
        user = self._by_sid.get(sid)
        if user is None or not self.sessions.is_open(sid):
            return None
        self._by_sid.move_to_end(sid)
        return user

    async def end(self, sid: str) -> None:
        user = self._by_sid.pop(sid, None)
        if user is not None:
            await user.admin.shutdown()

    async def sweep(self) -> None:
        """Close the clients of sessions that expired or were forgotten."""
        for sid in [s for s in self._by_sid if not self.sessions.is_open(s)]:
            await self.end(sid)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self.sweep()
            except Exception:  # a bug: say so, keep sweeping
                log.exception("console session sweep failed")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sweep_forever(),
                                                            name="console-user-sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._by_sid:
            await self.end(next(iter(self._by_sid)))
