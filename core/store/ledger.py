"""The operator's token budgets in the store: one ledger for every process and replica, kept across restarts.

A reservation is one transaction under the ledger's lock (PostgreSQL: an advisory lock every replica takes;
SQLite: ``BEGIN IMMEDIATE``): it reads what the visitor spent in 24 hours and everyone in the last hour, and
writes the new spend only if both budgets hold. Two replicas reserving at once are serialized by the lock,
and each reads the other's committed spend, so together they never go past a budget. Every time is the
database's clock (`Database.now_sql`), never a replica's: a replica whose clock is an hour off still counts
everyone's last hour. A settlement replaces
the estimate by what the run sent, in its own transaction.

Budgets fail closed: a ledger that cannot be read refuses every run on the operator's key with a sentence
(`Refused` ``ledger_down``); the app still runs a visitor's own key, which no ledger counts. A settlement
that cannot be written keeps the estimate (the safe side) and is tried again before the next reservation.
"""

from __future__ import annotations

import threading

from core.hosting import DAY_S, HOUR_S, HostedSettings, Refused, Spend, check_budgets
from core.store.engine import Database, DatabaseError

LEDGER_LOCK = "prefill-lab: budget"
PRUNE_EVERY_S = 600.0  # spends older than a day are deleted at most this often


class StoreLedger:
    """`core.hosting.Ledger` on a store's database (table ``budget_spends``)."""

    def __init__(self, db: Database, down: str = "") -> None:
        self.db = db
        self.down = down  # why the store asked for could not be opened: then nothing is reserved at all
        self._unsettled: dict[str, int] = {}  # settlements the database did not take yet: spend id -> tokens
        self._guard = threading.Lock()
        self._pruned_at = -PRUNE_EVERY_S

    def reserve(self, visitor: str, tokens: int, settings: HostedSettings) -> Spend:
        """Reserve ``tokens`` for ``visitor``'s run, or raise `Refused`: a budget is spent, or the ledger is down."""
        if self.down:
            raise Refused("ledger_down", reason=self.down)
        self._settle_pending()
        try:
            with self.db.transaction(lock=LEDGER_LOCK) as tx:
                now = tx.now()  # the database's clock, read under the lock: every replica's spends on one clock
                spend = Spend(visitor, tokens, now)
                mine = tx.execute("SELECT COALESCE(SUM(tokens), 0) FROM budget_spends WHERE visitor = ? AND "
                                  "reserved_at >= ?", (visitor, now - DAY_S)).scalar()
                hour, oldest = tx.execute("SELECT COALESCE(SUM(tokens), 0), MIN(reserved_at) FROM budget_spends "
                                          "WHERE reserved_at >= ?", (now - HOUR_S,)).one() or (0, None)
                check_budgets(settings, tokens, now, int(mine), int(hour), oldest)
                tx.execute("INSERT INTO budget_spends (id, visitor, tokens, reserved_at) VALUES (?, ?, ?, ?)",
                           (spend.id, visitor, tokens, now))
                if now - self._pruned_at >= PRUNE_EVERY_S:
                    self._pruned_at = now
                    tx.execute("DELETE FROM budget_spends WHERE reserved_at < ?", (now - DAY_S,))
        except DatabaseError as exc:
            raise Refused("ledger_down", reason=str(exc)) from None
        return spend

    def settle(self, spend: Spend, tokens: int) -> None:
        """Charge what the run sent; kept and tried again later if the database does not take it now."""
        spend.tokens = tokens
        with self._guard:
            self._unsettled[spend.id] = tokens
        self._settle_pending()

    def _settle_pending(self) -> None:
        with self._guard:
            pending = dict(self._unsettled)
        for spend_id, tokens in pending.items():
            try:
                self.db.execute("UPDATE budget_spends SET tokens = ?, settled = 1 WHERE id = ?", (tokens, spend_id))
            except DatabaseError:
                return  # the estimate stands until the database answers again
            with self._guard:
                if self._unsettled.get(spend_id) == tokens:
                    del self._unsettled[spend_id]

    def spent(self, since_s: float = HOUR_S) -> int:
        """Everyone's tokens of the last ``since_s`` seconds (reserved or settled)."""
        total = self.db.execute(f"SELECT COALESCE(SUM(tokens), 0) FROM budget_spends WHERE reserved_at >= "
                                f"{self.db.now_sql} - ?", (since_s,)).scalar()
        return int(total)
