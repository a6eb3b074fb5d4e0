"""`drop_conditions`: leaving out the conditions of a generated Cypher query on values the question
does not name (pure text logic; the fallback's use of it is tested against the real graph)."""

from __future__ import annotations

from tools.cypher_guard import drop_conditions


def test_a_property_map_entry_goes_and_a_plain_return_becomes_distinct() -> None:
    query = ("MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service {service_id: 'ledger-x'}) "
             "WHERE o.week = '2026-W30' AND o.role = 'secondary' RETURN e.name")
    assert drop_conditions(query, ["ledger-x"]) == ("MATCH (e:Employee)-[o:ON_CALL_FOR]->(s:Service) "
                                                    "WHERE o.week = '2026-W30' AND o.role = 'secondary' "
                                                    "RETURN DISTINCT e.name")
    # one entry of several; the other stays
    assert drop_conditions("MATCH (s:Service {tier: 1, service_id: 'ledger-x'}) RETURN s.name", ["ledger-x"]) == \
        "MATCH (s:Service {tier: 1}) RETURN DISTINCT s.name"


def test_a_where_comparison_goes_with_its_and_or_the_whole_where() -> None:
    both = "MATCH (s:Service)<-[o:ON_CALL_FOR]-(e) WHERE s.service_id = 'ledger-x' AND o.week = '2026-W30' RETURN e.name"
    out = drop_conditions(both, ["ledger-x"])
    assert out is not None and "ledger-x" not in out and "o.week = '2026-W30'" in out and "AND" not in out
    alone = "MATCH (s:Service)<-[o:ON_CALL_FOR]-(e) WHERE s.service_id = 'ledger-x' RETURN e.name"
    assert drop_conditions(alone, ["ledger-x"]) == "MATCH (s:Service)<-[o:ON_CALL_FOR]-(e) RETURN DISTINCT e.name"


def test_an_aggregate_keeps_its_return_and_an_unread_shape_gives_none() -> None:
    counted = "MATCH (e)-[o:ON_CALL_FOR]->(s:Service {service_id: 'ledger-x'}) RETURN e.name, count(o) AS n"
    assert drop_conditions(counted, ["ledger-x"]) == "MATCH (e)-[o:ON_CALL_FOR]->(s:Service) RETURN e.name, count(o) AS n"
    # an IN list is not read: the value stays, so the caller repairs instead
    assert drop_conditions("MATCH (s:Service) WHERE s.service_id IN ['ledger-x'] RETURN s.name", ["ledger-x"]) is None
    assert drop_conditions("MATCH (s:Service) RETURN s.name", ["ledger-x"]) is None  # nothing to leave out
