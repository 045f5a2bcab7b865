"""Advertiser changes through the real path: advertiser API -> PostgreSQL -> Debezium (Kafka Connect) ->
the index builder on the Flink cluster -> serving.* -> two running ad servers."""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import psycopg

from schemas.topics import SERVING_ADS
from serving.adserver.app import ServerConfig
from serving.adserver.main import start_ad_server
from serving.adserver.settings import AdServerSettings
from tests.integration.campaign_world import KEYS, RELAXED_DEADLINE_MS, World, winner as _winner


def test_a_pause_stops_both_servers_and_a_bid_change_changes_the_price(platform, index_builder):
    placement = f"cc-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with World(platform) as w:
            auth = await w.advertiser()
            winner_c, winner_ad = await w.campaign_with_ad(auth, placement, 3_000_000)
            rival_c, rival_ad = await w.campaign_with_ad(auth, placement, 2_000_000)

            async def both_serve_winner() -> bool:
                # the winner, priced by the rival ($2 CPM: 2,000 micros an impression): the rival's ad was
                # approved second and may reach a server a poll later, and alone the winner pays the reserve
                now_ms = int(time.time() * 1000)
                answers = [_winner(await w.ask(s, placement)) or {} for s in w.servers]
                return all(a.get("ad_id") == winner_ad["ad_id"]
                           and KEYS.verify(a["token"], now_ms).price_micros == 2_000 for a in answers)
            await w.until(both_serve_winner, "both servers serving the new ads")
            first_price = KEYS.verify(_winner(await w.ask(w.servers[0], placement))["token"],
                                      int(time.time() * 1000)).price_micros

            status, changed = await w.call("PATCH", f"/v1/ads/{rival_ad['ad_id']}", auth, {"bid_micros": 2_500_000})
            assert status == 200 and changed["version"] == 3  # created, approved, changed

            async def price_rose() -> bool:
                slot = _winner(await w.ask(w.servers[1], placement))
                return KEYS.verify(slot["token"], int(time.time() * 1000)).price_micros > first_price
            await w.until(price_rose, "the runner-up's new bid setting the price")

            status, paused = await w.call("POST", f"/v1/campaigns/{winner_c['campaign_id']}/pause", auth)
            assert status == 200 and paused["status"] == "PAUSED"

            async def both_stopped() -> bool:
                answers = [await w.ask(s, placement) for s in w.servers]
                return all((_winner(a) or {}).get("campaign_id") != winner_c["campaign_id"] for a in answers)
            waited = await w.until(both_stopped, "both servers to stop serving the paused campaign")
            lags = [s.server.state.commit_lag_s for s in w.servers]
            return first_price, waited, lags

    first_price, waited, lags = asyncio.run(scenario())
    assert first_price > 0 and waited < 60 and all(lag < 60 for lag in lags)


def test_a_rolled_back_transaction_never_reaches_an_index(platform, index_builder):
    placement = f"cc-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with World(platform) as w:
            auth = await w.advertiser()
            campaign, ad = await w.campaign_with_ad(auth, placement, 1_000_000)
            with psycopg.connect(platform.postgres_dsn) as conn:  # one transaction, rolled back
                ghost = conn.execute(
                    "INSERT INTO ads (campaign_id, advertiser_id, bid_type, bid_micros, creative_ref, landing_url, "
                    "targeting, status, review_status) VALUES (%s, %s, 'CPM', 9000000, 'ghost', "
                    "'https://ghost.example/', %s, 'ACTIVE', 'APPROVED') RETURNING ad_id",
                    (campaign["campaign_id"], campaign["advertiser_id"],
                     f'{{"placement": ["{placement}"]}}')).fetchone()[0]
                conn.rollback()
            # a committed change after it: once it arrived, the rolled-back one would have too
            status, _ = await w.call("PATCH", f"/v1/ads/{ad['ad_id']}", auth, {"bid_micros": 1_200_000})
            assert status == 200

            async def marker_applied() -> bool:
                rows = [s.server.state.index.row_of(ad["ad_id"]) for s in w.servers]
                return all(r is not None and s.server.state.index.bid_micros.data[r] == 1_200_000
                           for r, s in zip(rows, w.servers))
            await w.until(marker_applied, "the committed change reaching both servers")
            return ghost, [s.server.state.index.ids.get(ghost) for s in w.servers], \
                [(_winner(await w.ask(s, placement)) or {}).get("ad_id") for s in w.servers]

    ghost, rows, winners = asyncio.run(scenario())
    assert rows == [None, None] and ghost not in winners


def test_bad_input_is_refused_and_nothing_is_written_and_advertisers_are_isolated(platform):
    async def scenario():
        async with World(platform) as w:
            auth, other = await w.advertiser(), await w.advertiser()
            campaign, ad = await w.campaign_with_ad(auth, "cc-iso", 1_000_000, approve=False)
            cid = campaign["campaign_id"]
            refusals = [
                await w.call("POST", "/v1/campaigns", auth, {"name": "x", "bid_type": "CPM",
                                                              "daily_budget_micros": -1, "timezone": "UTC"}),
                await w.call("POST", "/v1/campaigns", auth, {"name": "x", "bid_type": "CPM", "daily_budget_micros": 1,
                                                              "timezone": "UTC", "flight_start": "2027-01-02T00:00:00Z",
                                                              "flight_end": "2027-01-01T00:00:00Z"}),
                await w.call("PATCH", f"/v1/ads/{ad['ad_id']}", auth, {"targeting": {"religion": ["x"]}}),
                await w.call("PATCH", f"/v1/ads/{ad['ad_id']}", auth, {"targeting": {"shoe_size": ["44"]}}),
                await w.call("PATCH", f"/v1/campaigns/{cid}", auth, {"cap_per_day": 0}),
            ]
            unauthenticated = await w.call("GET", f"/v1/campaigns/{cid}", {})
            foreign = [await w.call("GET", f"/v1/campaigns/{cid}", other),
                       await w.call("PATCH", f"/v1/campaigns/{cid}", other, {"status": "PAUSED"}),
                       await w.call("GET", f"/v1/ads/{ad['ad_id']}", other),
                       await w.call("PATCH", f"/v1/ads/{ad['ad_id']}", other, {"bid_micros": 1})]
            after_c = await w.call("GET", f"/v1/campaigns/{cid}", auth)
            after_a = await w.call("GET", f"/v1/ads/{ad['ad_id']}", auth)
            listed = await w.call("GET", "/v1/campaigns", auth)
            return refusals, unauthenticated, foreign, after_c, after_a, listed

    refusals, unauthenticated, foreign, after_c, after_a, listed = asyncio.run(scenario())
    assert [(s, b["field"]) for s, b in refusals] == [
        (400, "daily_budget_micros"), (400, "flight_end"), (400, "targeting.religion"),
        (400, "targeting.shoe_size"), (400, "cap_per_day")]
    assert unauthenticated[0] == 401
    assert [s for s, _ in foreign] == [404, 404, 404, 404]
    assert after_c[1]["version"] == 1 and after_c[1]["status"] == "ACTIVE"
    assert after_a[1]["version"] == 1 and after_a[1]["bid_micros"] == 1_000_000
    assert len(listed[1]) == 1


def test_a_server_booting_from_a_snapshot_cut_before_a_pause_still_honours_it(platform, index_builder,
                                                                             snapshot_folder, tmp_path):
    import json
    import shutil

    from serving.snapshots import latest_snapshot

    placement = f"cc-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with World(platform) as w:
            auth = await w.advertiser()
            campaign, ad = await w.campaign_with_ad(auth, placement, 2_000_000)

            async def served() -> bool:
                return (_winner(await w.ask(w.servers[0], placement)) or {}).get("ad_id") == ad["ad_id"]
            await w.until(served, "the new ad reaching the server")
            served_ms = int(time.time() * 1000)

            async def fresh_snapshot() -> bool:  # one the index builder cut after the ad was served
                found = latest_snapshot(snapshot_folder)
                return found is not None and json.loads((found / "offsets.json").read_text())["cut_ms"] > served_ms
            await w.until(fresh_snapshot, "the index builder writing a snapshot")
            folder = tmp_path / latest_snapshot(snapshot_folder).name
            shutil.copytree(latest_snapshot(snapshot_folder), folder)  # cut before the pause
            status, _ = await w.call("POST", f"/v1/campaigns/{campaign['campaign_id']}/pause", auth)
            assert status == 200

            async def paused_everywhere() -> bool:
                return _winner(await w.ask(w.servers[0], placement)) is None
            await w.until(paused_everywhere, "the pause reaching the running server")
            booted = await start_ad_server(AdServerSettings.on_platform(platform, KEYS, port=0, snapshot_dir=tmp_path),
                                           config=ServerConfig(server_id="cc-snapshot", deadline_ms=RELAXED_DEADLINE_MS))
            try:
                answer = await w.ask(booted, placement)
                row = booted.server.state.campaigns.row_of(campaign["campaign_id"])
                status_code = int(booted.server.state.campaigns.status.data[row])
                in_snapshot = booted.server.state.index.row_of(ad["ad_id"]) is not None
                return folder, booted.boot, answer, status_code, in_snapshot
            finally:
                await booted.stop()

    folder, boot, answer, status_code, in_snapshot = asyncio.run(scenario())
    assert boot["snapshot"] == str(folder) and boot["snapshot_records"] > 0 and in_snapshot
    assert _winner(answer) is None and status_code != 0  # 0 = ACTIVE: the replay applied the pause


def test_two_campaigns_of_one_exclusion_category_never_share_a_page_until_one_changes_it(platform, index_builder):
    placement = f"cc-{uuid.uuid4().hex[:8]}"
    pages_per_server = 10

    async def scenario():
        async with World(platform) as w:
            first_car, second_car, bookshop = await w.advertiser(), await w.advertiser(), await w.advertiser()
            car_a_campaign, car_a = await w.campaign_with_ad(first_car, placement, 3_000_000, exclusion_category=7)
            car_b_campaign, car_b = await w.campaign_with_ad(second_car, placement, 2_900_000, exclusion_category=7)
            book_campaign, book = await w.campaign_with_ad(bookshop, placement, 1_000_000)
            carried = [a["exclusion_category"] for a in (car_a, car_b, book)]  # each ad carries its campaign's
            ads = {"car_a": car_a["ad_id"], "car_b": car_b["ad_id"], "book": book["ad_id"]}

            campaign_ids = {int(c["campaign_id"]) for c in (car_a_campaign, car_b_campaign, book_campaign)}

            def approved_everywhere() -> bool:
                # ads and campaigns travel on two topics: an ad serves once its campaign has arrived as well
                return all(w.applied(SERVING_ADS, a["ad_id"], a["version"]) for a in (car_a, car_b, book)) and \
                    all(campaign_ids <= {int(c) for c in s.server.state.campaigns.campaign_ids()} for s in w.servers)
            await w.until(approved_everywhere, "the three approved ads and their campaigns reaching both servers")
            indexed = [[int(s.server.state.index.exclusion_category.data[s.server.state.index.row_of(ad_id)])
                        for ad_id in ads.values()] for s in w.servers]
            # both cars outbid the bookshop: only the category keeps the second car off the page
            rivals = [await two_slot_page(w, s, placement) for s in w.servers for _ in range(pages_per_server)]

            status, changed = await w.call("PATCH", f"/v1/campaigns/{car_b_campaign['campaign_id']}", second_car,
                                           {"exclusion_category": 8})
            assert status == 200 and changed["exclusion_category"] == 8
            _, car_b_now = await w.call("GET", f"/v1/ads/{car_b['ad_id']}", second_car)

            def recompiled_everywhere() -> bool:
                return w.applied(SERVING_ADS, car_b["ad_id"], car_b_now["version"])
            await w.until(recompiled_everywhere, "the second car's ad, recompiled, reaching both servers")
            apart = [await two_slot_page(w, s, placement) for s in w.servers for _ in range(pages_per_server)]
            return carried, indexed, ads, rivals, (car_b["version"], car_b_now), apart

    carried, indexed, ads, rivals, (version_before, car_b_now), apart = asyncio.run(scenario())
    assert carried == [7, 7, 0] and indexed == [[7, 7, 0], [7, 7, 0]]
    # every page is full, and none shows both cars
    assert all(len(page) == 2 and not {ads["car_a"], ads["car_b"]} <= set(page) for page in rivals), (ads, rivals)
    assert car_b_now["exclusion_category"] == 8 and car_b_now["version"] == version_before + 1
    # once their categories differ, the two best bids share pages again
    assert any(set(page) == {ads["car_a"], ads["car_b"]} for page in apart)


async def two_slot_page(w: World, server, placement: str) -> list[int]:
    """The ad ids a two-slot request of a new user gets from `server`, in slot order."""
    body = {"placement": placement, "slots": [{"position": 1}, {"position": 2}],
            "user_id": f"u-{uuid.uuid4().hex[:6]}"}
    async with w.http.post(f"http://127.0.0.1:{server.port}/v1/ads", json=body) as r:
        assert r.status == 200
        answer = await r.json()
    return [s["ad_id"] for s in answer["slots"] if s.get("ad_id")]


def test_a_row_too_large_to_stream_is_dead_lettered_and_a_pause_behind_it_still_reaches_the_servers(
        platform, index_builder):
    """One row must not stop the change stream: an ad made larger by hand in PostgreSQL than any record the API
    can create goes to cdc.dead_letters as a letter, the connector's task keeps running, and a pause committed
    after it reaches both ad servers within the 10 s freshness bound."""
    from confluent_kafka import Consumer, TopicPartition

    from infra.platform.cdc import DEAD_LETTER_ABOVE_BYTES, connector_state
    from schemas import topics

    placement = f"cc-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with World(platform) as w:
            auth = await w.advertiser()
            campaign, ad = await w.campaign_with_ad(auth, placement, 3_000_000)
            _, bloated = await w.campaign_with_ad(auth, f"{placement}-x", 1_000_000)

            async def both_serve() -> bool:
                answers = [await w.ask(s, placement) for s in w.servers]
                return all((_winner(a) or {}).get("ad_id") == ad["ad_id"] for a in answers)
            await w.until(both_serve, "both servers serving the campaign")
            with psycopg.connect(platform.postgres_dsn, autocommit=True) as db:  # by hand, past the API's limits
                db.execute("UPDATE ads SET targeting = jsonb_build_object('interest', jsonb_build_array("
                           "repeat('\"', %s))) WHERE ad_id = %s", (3_000_000, bloated["ad_id"]))
            status, paused = await w.call("POST", f"/v1/campaigns/{campaign['campaign_id']}/pause", auth)
            assert status == 200 and paused["status"] == "PAUSED"

            async def both_stopped() -> bool:
                answers = [await w.ask(s, placement) for s in w.servers]
                return all((_winner(a) or {}).get("campaign_id") != campaign["campaign_id"] for a in answers)
            return bloated, await w.until(both_stopped, "both servers to stop serving the paused campaign")

    bloated, waited = asyncio.run(scenario())
    assert waited < 10, f"the pause behind the oversized row took {waited:.1f} s"
    state = connector_state(platform.connect_url)
    assert "task 0 RUNNING" in state and not state.startswith("FAILED"), state

    consumer = Consumer({"bootstrap.servers": platform.kafka_bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topics.CDC_DEAD_LETTERS, 0, 0)])
    letters, deadline = [], time.monotonic() + 30
    try:
        while time.monotonic() < deadline and not any(json.loads(m.key()) == {"ad_id": bloated["ad_id"]}
                                                      for m in letters):
            letters += [m for m in consumer.consume(100, timeout=1.0) if not m.error()]
    finally:
        consumer.close()
    mine = [json.loads(m.value()) for m in letters if json.loads(m.key()) == {"ad_id": bloated["ad_id"]}]
    assert len(mine) == 1, f"{len(letters)} letters, none or several for ad {bloated['ad_id']}"
    assert mine[0]["source_topic"] == topics.CDC_ADS and mine[0]["bytes"] > DEAD_LETTER_ABOVE_BYTES
    assert mine[0]["max_bytes"] == DEAD_LETTER_ABOVE_BYTES and "lsn" in mine[0]["source_offset"]
