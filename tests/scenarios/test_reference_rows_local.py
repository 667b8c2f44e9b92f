"""The reference rows the shared events add, on the local Snowflake server alone (the world's tables installed,
no Coalesce, no history): a new key's row is added once however many nights the event is listed."""

from __future__ import annotations

from ops_warehouse import warehouse

from dw_local.scenarios.suite import SUITE_DIR
from dw_local.scenarios.worlds import FileScenarioWorld

__all__ = ["warehouse"]

BILLPAY = SUITE_DIR.parent / "worlds" / "billpay" / "world.yaml"
UNMAPPED_BILLER = {
    "kind": "new_key_parent_unmapped", "table": "BILL_PAYMENTS", "column": "PAYEE_CODE", "value": "VIDEOBUS",
    "reference": "PAYEE_CODES", "parent": "BILLERS.BILLER_ID",
    "row": {"PAYEE_CODE": "VIDEOBUS", "PAYEE_NAME": "Videotron Affaires", "BILLER_ID": 110,
            "UPDATED_AT": "2026-06-23 09:15:00"},
}  # fmt: skip
MAPPED = {
    "kind": "new_key_mapped", "table": "BILL_PAYMENTS", "column": "PAYEE_CODE", "value": "BELLFIBE",
    "reference": "PAYEE_CODES",
    "row": {"PAYEE_CODE": "BELLFIBE", "PAYEE_NAME": "Bell Fibe TV", "BILLER_ID": 104, "UPDATED_AT": None},
}  # fmt: skip


def _count(cur, table: str, column: str, value) -> int:
    cur.execute(f'SELECT COUNT(*) FROM COOP_DW.REGISTRY.{table} WHERE "{column}" = %s', (value,))
    return cur.fetchone()[0]


def test_a_new_keys_reference_row_is_added_once_and_its_parent_stays_missing(warehouse):
    lw, _ = warehouse
    scenario_world = FileScenarioWorld(BILLPAY)
    world = scenario_world.world
    world.install(lw.snowflake)
    night = world.spec.history_nights
    events = [scenario_world.parse_event(e, night) for e in (UNMAPPED_BILLER, MAPPED)]
    with world.cursor(lw.snowflake) as cur:
        for tonight in (night, night + 1):  # listed on each night the key keeps arriving
            for event in events:
                event.before_load(world, cur, tonight)
        assert _count(cur, "PAYEE_CODES", "PAYEE_CODE", "VIDEOBUS") == 1
        assert _count(cur, "PAYEE_CODES", "PAYEE_CODE", "BELLFIBE") == 1  # a NULL column matches no row
        assert _count(cur, "BILLERS", "BILLER_ID", 110) == 0
        cur.execute("SELECT COUNT(*) FROM COOP_DW.REGISTRY.PAYEE_CODES")
        assert cur.fetchone()[0] == len(world.once_frame("PAYEE_CODES")) + 2
