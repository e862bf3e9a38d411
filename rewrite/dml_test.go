package rewrite

import (
	"testing"
	"time"
)

// sessionsCatalog knows public.sessions (id, owner, note, expires_at).
func sessionsCatalog() *Catalog { return NewCatalog(sessionsCatalogData()) }

func sessionsCatalogData() CatalogData {
	return CatalogData{
		Tables: map[string]*TableInfo{
			"public.sessions": {Columns: []Column{
				{Name: "id", Type: "integer"}, {Name: "owner", Type: "integer"},
				{Name: "note", Type: "text"}, {Name: "expires_at", Type: "timestamp with time zone"},
			}},
		},
		Schemas: map[string][]string{"sessions": {"public"}},
	}
}

func TestRewriteUpdateDelete(t *testing.T) {
	rw := newTestRewriter(t)
	S := `"sessions"`
	set := `, "expires_at" = ` + stamp
	cases := []rwCase{
		{"update without where", `UPDATE sessions SET note = 'x'`,
			`UPDATE "public".sessions SET note = 'x'` + set + ` WHERE ` + live(S)},
		{"update with where", `UPDATE sessions SET note = 'x' WHERE id = 1 OR owner = 2`,
			`UPDATE "public".sessions SET note = 'x'` + set + ` WHERE (id = 1 OR owner = 2) AND ` + live(S)},
		{"update alias returning", `UPDATE sessions AS s SET note = 'x' WHERE s.id = 1 RETURNING s.id, s.note`,
			`UPDATE "public".sessions AS s SET note = 'x'` + set + ` WHERE (s.id = 1) AND ` + live(`"s"`) + ` RETURNING s.id, s.note`},
		{"update returning without where", `UPDATE sessions SET note = 'x' RETURNING *`,
			`UPDATE "public".sessions SET note = 'x'` + set + ` WHERE ` + live(S) + ` RETURNING *`},
		{"update sets expiry itself", `UPDATE sessions SET note = 'x', expires_at = NULL WHERE id = 1`,
			`UPDATE "public".sessions SET note = 'x', expires_at = NULL WHERE (id = 1) AND ` + live(S)},
		{"update sets expiry to DEFAULT", `UPDATE sessions SET note = 'x', expires_at = DEFAULT WHERE id = 1`,
			`UPDATE "public".sessions SET note = 'x', expires_at = ` + stamp + ` WHERE (id = 1) AND ` + live(S)},
		{"update sets expiry in a multi-column assignment", `UPDATE sessions SET (note, expires_at) = ('x', now())`,
			`UPDATE "public".sessions SET (note, expires_at) = ('x', now()) WHERE ` + live(S)},
		{"update from", `UPDATE sessions s SET note = u.name FROM users u WHERE u.id = s.owner`,
			`UPDATE "public".sessions s SET note = u.name` + set + ` FROM users u WHERE (u.id = s.owner) AND ` + live(`"s"`)},
		{"update from a TTL table", `UPDATE users u SET name = 'x' FROM sessions s WHERE s.owner = u.id`,
			`UPDATE users u SET name = 'x' FROM ` + join(`"public".sessions s`, `"s"`, 0) + ` WHERE s.owner = u.id`},
		{"update with subquery in set", `UPDATE users SET n = (SELECT count(*) FROM sessions WHERE owner = users.id)`,
			`UPDATE users SET n = (SELECT count(*) FROM ` + join(`"public".sessions`, S, 0) + ` WHERE owner = users.id)`},
		{"update where current of", `UPDATE sessions SET note = 'x' WHERE CURRENT OF c`,
			`UPDATE "public".sessions SET note = 'x'` + set + ` WHERE CURRENT OF c`},
		{"update only", `UPDATE ONLY sessions SET note = 'x' WHERE id IS DISTINCT FROM 3`,
			`UPDATE ONLY "public".sessions SET note = 'x'` + set + ` WHERE (id IS DISTINCT FROM 3) AND ` + live(S)},
		{"update set is distinct from", `UPDATE sessions SET flag = note IS DISTINCT FROM 'a' FROM users`,
			`UPDATE "public".sessions SET flag = note IS DISTINCT FROM 'a'` + set + ` FROM users WHERE ` + live(S)},
		{"update trailing comment and semicolon", "UPDATE sessions SET note = 'x' WHERE id = 1; -- done",
			`UPDATE "public".sessions SET note = 'x'` + set + " WHERE (id = 1) AND " + live(S) + "; -- done"},
		{"update with trailing line comment", "UPDATE sessions SET note = 'x' -- why\n",
			`UPDATE "public".sessions SET note = 'x'` + set + " WHERE " + live(S) + " -- why\n"},
		{"update without refresh rule", `UPDATE events SET x = 1`,
			`UPDATE "public".events SET x = 1 WHERE ` + ruleLive(t, "public.events", `"events"`)},
		{"update refresh of a per-row lifetime", `UPDATE jobs SET state = 'run' WHERE id = 1`,
			`UPDATE "public".jobs SET state = 'run', "ttl_seconds" = ` + testRule(t, "public.jobs").RefreshValue(`"jobs"`, 2*time.Hour) + ` WHERE (id = 1) AND ` + ruleLive(t, "public.jobs", `"jobs"`)},
		{"delete without where", `DELETE FROM sessions`,
			`DELETE FROM "public".sessions WHERE ` + live(S)},
		{"delete with where returning", `DELETE FROM sessions s WHERE s.id = $1 RETURNING s.id`,
			`DELETE FROM "public".sessions s WHERE (s.id = $1) AND ` + live(`"s"`) + ` RETURNING s.id`},
		{"delete using", `DELETE FROM sessions s USING users u WHERE u.id = s.owner AND u.name = 'x'`,
			`DELETE FROM "public".sessions s USING users u WHERE (u.id = s.owner AND u.name = 'x') AND ` + live(`"s"`)},
		{"delete using a TTL table", `DELETE FROM users u USING sessions s WHERE s.owner = u.id`,
			`DELETE FROM users u USING ` + join(`"public".sessions s`, `"s"`, 0) + ` WHERE s.owner = u.id`},
		{"delete current of", `DELETE FROM sessions WHERE CURRENT OF c`, `DELETE FROM "public".sessions WHERE CURRENT OF c`},
		{"delete schema qualified", `DELETE FROM public.sessions WHERE id = 1`,
			`DELETE FROM public.sessions WHERE (id = 1) AND ` + live(S)},
		{"delete in a CTE", `WITH d AS (DELETE FROM sessions WHERE owner = 1 RETURNING id) SELECT count(*) FROM d`,
			`WITH d AS (DELETE FROM "public".sessions WHERE (owner = 1) AND ` + live(S) + ` RETURNING id) SELECT count(*) FROM d`},
		{"update in a CTE without where", `WITH u AS MATERIALIZED (UPDATE sessions SET note = 'x') SELECT 1`,
			`WITH u AS MATERIALIZED (UPDATE "public".sessions SET note = 'x'` + set + ` WHERE ` + live(S) + `) SELECT 1`},
		{"update target named like a CTE", `WITH sessions AS (SELECT 1) UPDATE sessions SET note = 'x'`,
			`WITH sessions AS (SELECT 1) UPDATE "public".sessions SET note = 'x'` + set + ` WHERE ` + live(S)},
		{"delete of another table", `DELETE FROM users WHERE id = 1`, ``},
		{"multi-column SET from a subquery", `UPDATE accounts a SET (v, k) = (SELECT s.v, s.k FROM sessions s WHERE s.id = a.id)`,
			`UPDATE accounts a SET (v, k) = (SELECT s.v, s.k FROM ` + join(`"public".sessions s`, `"s"`, 0) + ` WHERE s.id = a.id)`},
		{"multi-column SET of the target", `UPDATE sessions SET (note, owner) = (SELECT name, id FROM users WHERE id = 1)`,
			`UPDATE "public".sessions SET (note, owner) = (SELECT name, id FROM users WHERE id = 1)` + set + ` WHERE ` + live(S)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
	}
}

func TestRewriteInsert(t *testing.T) {
	rw := newTestRewriter(t)
	S := `"sessions"`
	cases := []rwCase{
		{"column list", `INSERT INTO sessions (id, note) VALUES (1, 'a')`,
			`INSERT INTO "public".sessions (id, note, "expires_at") VALUES (1, 'a', ` + stamp + `)`},
		{"multi-row with parameters", `INSERT INTO sessions (id, note) VALUES ($1, $2), ($3, $4)`,
			`INSERT INTO "public".sessions (id, note, "expires_at") VALUES ($1, $2, ` + stamp + `), ($3, $4, ` + stamp + `)`},
		{"explicit value wins", `INSERT INTO sessions (id, expires_at) VALUES (1, '2001-02-03')`, `INSERT INTO "public".sessions (id, expires_at) VALUES (1, '2001-02-03')`},
		{"explicit NULL wins", `INSERT INTO sessions (id, expires_at) VALUES (1, NULL)`, `INSERT INTO "public".sessions (id, expires_at) VALUES (1, NULL)`},
		{"explicit DEFAULT is stamped", `INSERT INTO sessions (id, expires_at) VALUES (1, DEFAULT)`, `INSERT INTO "public".sessions (id, expires_at) VALUES (1, ` + stamp + `)`},
		{"DEFAULT stamped row by row", `INSERT INTO sessions (expires_at, id) VALUES (DEFAULT, 1), ('2030-01-01', 2), (default, $1)`,
			`INSERT INTO "public".sessions (expires_at, id) VALUES (` + stamp + `, 1), ('2030-01-01', 2), (` + stamp + `, $1)`},
		{"DEFAULT of another column kept", `INSERT INTO sessions (id, note) VALUES (DEFAULT, DEFAULT)`,
			`INSERT INTO "public".sessions (id, note, "expires_at") VALUES (DEFAULT, DEFAULT, ` + stamp + `)`},
		{"DEFAULT VALUES", `INSERT INTO sessions DEFAULT VALUES RETURNING id`,
			`INSERT INTO "public".sessions ("expires_at") VALUES (` + stamp + `) RETURNING id`},
		{"target alias", `INSERT INTO sessions AS s (id) VALUES (1) RETURNING s.id`,
			`INSERT INTO "public".sessions AS s (id, "expires_at") VALUES (1, ` + stamp + `) RETURNING s.id`},
		{"OVERRIDING", `INSERT INTO sessions (id) OVERRIDING SYSTEM VALUE VALUES (1)`,
			`INSERT INTO "public".sessions (id, "expires_at") OVERRIDING SYSTEM VALUE VALUES (1, ` + stamp + `)`},
		{"comments inside rows", "INSERT INTO sessions (id /* key */) VALUES (1 -- one\n), (2)",
			"INSERT INTO \"public\".sessions (id, \"expires_at\" /* key */) VALUES (1, " + stamp + " -- one\n), (2, " + stamp + ")"},
		{"insert select", `INSERT INTO sessions (id, owner, note) SELECT id + 100, id, 'from users' FROM users WHERE id <= 2`,
			`INSERT INTO "public".sessions (id, owner, note, "expires_at") SELECT id + 100, id, 'from users', ` + stamp + ` FROM users WHERE id <= 2`},
		{"insert select with label keyword", `INSERT INTO sessions (id) SELECT 1 AS from`,
			`INSERT INTO "public".sessions (id, "expires_at") SELECT 1 AS from, ` + stamp},
		{"insert select is distinct from", `INSERT INTO sessions (id, flag) SELECT 1, a IS DISTINCT FROM b FROM t`,
			`INSERT INTO "public".sessions (id, flag, "expires_at") SELECT 1, a IS DISTINCT FROM b, ` + stamp + ` FROM t`},
		{"insert select union", `INSERT INTO sessions (id) SELECT 1 UNION (SELECT 2 ORDER BY 1)`,
			`INSERT INTO "public".sessions (id, "expires_at") SELECT 1, ` + stamp + ` UNION (SELECT 2, ` + stamp + ` ORDER BY 1)`},
		{"insert select star", `INSERT INTO sessions (id, owner) SELECT * FROM pairs`,
			`INSERT INTO "public".sessions (id, owner, "expires_at") SELECT *, ` + stamp + ` FROM pairs`},
		{"insert select reading the TTL table", `INSERT INTO sessions (id, owner) SELECT id + 1000, owner FROM sessions`,
			`INSERT INTO "public".sessions (id, owner, "expires_at") SELECT id + 1000, owner, ` + stamp + ` FROM ` + join(`"public".sessions`, S, 0)},
		{"insert TABLE is wrapped", `INSERT INTO sessions (id) TABLE ids`,
			`INSERT INTO "public".sessions (id, "expires_at") SELECT *, ` + stamp + ` FROM (TABLE ids) AS _ttl_src`},
		{"insert VALUES with ORDER BY is wrapped", `INSERT INTO sessions (id) VALUES (2), (1) ORDER BY 1 ON CONFLICT DO NOTHING`,
			`INSERT INTO "public".sessions (id, "expires_at") SELECT *, ` + stamp + ` FROM (VALUES (2), (1) ORDER BY 1) AS _ttl_src ON CONFLICT DO NOTHING`},
		{"insert with CTE source", `WITH x AS (SELECT 1 AS id) INSERT INTO sessions (id) SELECT id FROM x`,
			`WITH x AS (SELECT 1 AS id) INSERT INTO "public".sessions (id, "expires_at") SELECT id, ` + stamp + ` FROM x`},
		{"insert select with its own WITH", `INSERT INTO sessions (id) WITH x AS (SELECT 1 AS id) SELECT id FROM x`,
			`INSERT INTO "public".sessions (id, "expires_at") WITH x AS (SELECT 1 AS id) SELECT id, ` + stamp + ` FROM x`},
		{"on conflict do nothing", `INSERT INTO sessions (id) VALUES (1) ON CONFLICT (id) DO NOTHING`,
			`INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + stamp + `) ON CONFLICT (id) DO NOTHING`},
		{"on conflict do update refreshes", `INSERT INTO sessions (id, note) VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET note = excluded.note WHERE sessions.owner = 1 RETURNING id`,
			`INSERT INTO "public".sessions (id, note, "expires_at") VALUES (1, 'a', ` + stamp + `) ON CONFLICT (id) DO UPDATE SET note = excluded.note, "expires_at" = ` + stamp + ` WHERE (sessions.owner = 1) AND ` + live(S) + ` RETURNING id`},
		{"on conflict do update sets expiry", `INSERT INTO sessions (id, note) VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at`,
			`INSERT INTO "public".sessions (id, note, "expires_at") VALUES (1, 'a', ` + stamp + `) ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at WHERE ` + live(S)},
		{"on conflict on constraint", `INSERT INTO sessions (id, expires_at) VALUES (1, NULL) ON CONFLICT ON CONSTRAINT sessions_pkey DO UPDATE SET note = 'x'`,
			`INSERT INTO "public".sessions (id, expires_at) VALUES (1, NULL) ON CONFLICT ON CONSTRAINT sessions_pkey DO UPDATE SET note = 'x', "expires_at" = ` + stamp + ` WHERE ` + live(S)},
		{"on conflict do update of an aliased target", `INSERT INTO sessions AS s (id) VALUES (1) ON CONFLICT (id) WHERE owner > 0 DO UPDATE SET note = s.note || 'x' WHERE s.owner IS NOT NULL RETURNING s.id`,
			`INSERT INTO "public".sessions AS s (id, "expires_at") VALUES (1, ` + stamp + `) ON CONFLICT (id) WHERE owner > 0 DO UPDATE SET note = s.note || 'x', "expires_at" = ` + stamp + ` WHERE (s.owner IS NOT NULL) AND ` + live(`"s"`) + ` RETURNING s.id`},
		{"on conflict do update with a subquery in SET", `INSERT INTO public.sessions (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET note = (SELECT max(note) FROM sessions WHERE owner = 1)`,
			`INSERT INTO public.sessions (id, "expires_at") VALUES (1, ` + stamp + `) ON CONFLICT (id) DO UPDATE SET note = (SELECT max(note) FROM ` + join(`"public".sessions`, S, 0) + ` WHERE owner = 1), "expires_at" = ` + stamp + ` WHERE ` + live(S)},
		{"on conflict do update in a CTE", `WITH u AS (INSERT INTO sessions (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET note = 'x' RETURNING id) SELECT * FROM u`,
			`WITH u AS (INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + stamp + `) ON CONFLICT (id) DO UPDATE SET note = 'x', "expires_at" = ` + stamp + ` WHERE ` + live(S) + ` RETURNING id) SELECT * FROM u`},
		{"on conflict do update without refresh", `INSERT INTO events (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET x = 1`,
			`INSERT INTO "public".events (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET x = 1 WHERE ` + ruleLive(t, "public.events", `"events"`)},
		{"on conflict do update of a sidecar table", `INSERT INTO docs AS d (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET body = 'x'`,
			`INSERT INTO "public".docs AS d (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET body = 'x' WHERE ` + ruleLive(t, "public.docs", `"d"`)},
		{"insert in a CTE", `WITH i AS (INSERT INTO sessions (id) VALUES (1) RETURNING id) SELECT * FROM i`,
			`WITH i AS (INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + stamp + `) RETURNING id) SELECT * FROM i`},
		{"no stamping without default ttl", `INSERT INTO events (id) VALUES (1)`, `INSERT INTO "public".events (id) VALUES (1)`},
		{"sidecar is not stamped", `INSERT INTO docs (id) VALUES (1)`, `INSERT INTO "public".docs (id) VALUES (1)`},
		{"timestamp column", `INSERT INTO app.tokens (id) VALUES (1)`,
			`INSERT INTO app.tokens (id, "valid_until") VALUES (1, ` + ruleStamp(t, "app.tokens") + `)`},
		{"unix milliseconds", `INSERT INTO cache (k) VALUES ('a')`,
			`INSERT INTO "public".cache (k, "exp_ms") VALUES ('a', ` + ruleStamp(t, "public.cache") + `)`},
		{"date column", `INSERT INTO days (d) VALUES (1)`,
			`INSERT INTO "public".days (d, "until") VALUES (1, ` + ruleStamp(t, "public.days") + `)`},
		{"derived per-row lifetime", `INSERT INTO jobs (id) VALUES (1)`,
			`INSERT INTO "public".jobs (id, "ttl_seconds") VALUES (1, 7200)`},
		{"insert into another table", `INSERT INTO users (id) SELECT owner FROM sessions`,
			`INSERT INTO users (id) SELECT owner FROM ` + join(`"public".sessions`, S, 0)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
	}
}

func TestRewriteInsertWithoutColumnList(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: sessionsCatalog()})
	cases := []rwCase{
		{"values short of the expiry column", `INSERT INTO sessions VALUES (1, 2, 'a')`,
			`INSERT INTO "public".sessions ("id", "owner", "note", "expires_at") VALUES (1, 2, 'a', ` + stamp + `)`},
		{"fewer values", `INSERT INTO sessions VALUES (1), (2)`,
			`INSERT INTO "public".sessions ("id", "expires_at") VALUES (1, ` + stamp + `), (2, ` + stamp + `)`},
		{"values reach the expiry column", `INSERT INTO sessions VALUES (1, 2, 'a', NULL)`, `INSERT INTO "public".sessions VALUES (1, 2, 'a', NULL)`},
		{"select of known width", `INSERT INTO sessions SELECT 1, 2`,
			`INSERT INTO "public".sessions ("id", "owner", "expires_at") SELECT 1, 2, ` + stamp},
		{"select reaching the expiry column", `INSERT INTO sessions SELECT 1, 2, 'a', now()`, `INSERT INTO "public".sessions SELECT 1, 2, 'a', now()`},
		{"DEFAULT VALUES needs no catalog", `INSERT INTO sessions DEFAULT VALUES`,
			`INSERT INTO "public".sessions ("expires_at") VALUES (` + stamp + `)`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
	}
	rejects := []rejCase{
		{"select star", `INSERT INTO sessions SELECT * FROM other`, "0A000", []string{"public.sessions", "column list"}},
		{"TABLE", `INSERT INTO sessions TABLE other`, "0A000", []string{"public.sessions", "column list"}},
	}
	for _, c := range rejects {
		checkReject(t, rw, s, c)
	}
	checkReject(t, rw, nil, rejCase{"no catalog", `INSERT INTO sessions VALUES (1)`, "0A000", []string{"public.sessions", "column list"}})
}

func TestRewriteSessionTTL(t *testing.T) {
	rw := newTestRewriter(t)
	ten := 10 * time.Minute
	s := NewState(Session{TTL: &ten})
	const ten10 = `(pg_catalog.now() OPERATOR(pg_catalog.+) interval '600 seconds')`
	cases := []rwCase{
		{"override", `INSERT INTO sessions (id) VALUES (1)`,
			`INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + ten10 + `)`},
		{"override enables stamping", `INSERT INTO "Mixed Case" (id) VALUES (1)`,
			`INSERT INTO "public"."Mixed Case" (id, "Exp") VALUES (1, ` + ten10 + `)`},
		{"override applies to refresh", `UPDATE sessions SET note = 'x'`,
			`UPDATE "public".sessions SET note = 'x', "expires_at" = ` + ten10 + ` WHERE ` + live(`"sessions"`)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
	}
	res, err := rw.Rewrite(`SELECT * FROM sessions`, NewState(Session{Bypass: true}))
	if err != nil || res.SQL != `SELECT * FROM sessions` || res.Parsed || res.Rewritten {
		t.Errorf("bypass: %+v, %v", res, err)
	}
}
