package rewrite

import (
	"testing"
	"time"
)

func TestRewriteMerge(t *testing.T) {
	rw := newTestRewriter(t)
	S := `"sessions"`
	ls := live(`"s"`)
	set := `, "expires_at" = ` + stamp
	cases := []rwCase{
		{"target: live condition joins ON", `MERGE INTO sessions s USING src ON s.id = src.id WHEN MATCHED THEN DELETE`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN MATCHED THEN DELETE`},
		{"target without alias", `MERGE INTO sessions USING src ON sessions.id = src.id WHEN MATCHED THEN DO NOTHING`,
			`MERGE INTO "public".sessions USING src ON (sessions.id = src.id) AND ` + live(S) + ` WHEN MATCHED THEN DO NOTHING`},
		{"update refreshes, insert stamps", `MERGE INTO sessions AS s USING src ON s.id = src.id
WHEN MATCHED AND src.del THEN DELETE
WHEN MATCHED THEN UPDATE SET note = src.note
WHEN NOT MATCHED THEN INSERT (id, note) VALUES (src.id, src.note)`,
			`MERGE INTO "public".sessions AS s USING src ON (s.id = src.id) AND ` + ls + `
WHEN MATCHED AND src.del THEN DELETE
WHEN MATCHED THEN UPDATE SET note = src.note` + set + `
WHEN NOT MATCHED THEN INSERT (id, note, "expires_at") VALUES (src.id, src.note, ` + stamp + `)`},
		{"client's expiry wins", `MERGE INTO sessions s USING src ON s.id = src.id WHEN MATCHED THEN UPDATE SET expires_at = NULL WHEN NOT MATCHED THEN INSERT (id, expires_at) VALUES (src.id, NULL)`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN MATCHED THEN UPDATE SET expires_at = NULL WHEN NOT MATCHED THEN INSERT (id, expires_at) VALUES (src.id, NULL)`},
		{"DEFAULT VALUES", `MERGE INTO sessions s USING src ON s.id = src.id WHEN NOT MATCHED THEN INSERT DEFAULT VALUES`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN NOT MATCHED THEN INSERT ("expires_at") VALUES (` + stamp + `)`},
		{"OVERRIDING", `MERGE INTO sessions s USING src ON s.id = src.id WHEN NOT MATCHED BY TARGET THEN INSERT (id) OVERRIDING USER VALUE VALUES (src.id)`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN NOT MATCHED BY TARGET THEN INSERT (id, "expires_at") OVERRIDING USER VALUE VALUES (src.id, ` + stamp + `)`},
		{"CASE in ON and in conditions", `MERGE INTO sessions s USING src ON CASE WHEN src.k THEN s.id = src.id ELSE false END
WHEN MATCHED AND CASE WHEN s.owner = 1 THEN true END THEN UPDATE SET note = CASE WHEN src.n THEN 'a' END
WHEN NOT MATCHED THEN DO NOTHING`,
			`MERGE INTO "public".sessions s USING src ON (CASE WHEN src.k THEN s.id = src.id ELSE false END) AND ` + ls + `
WHEN MATCHED AND CASE WHEN s.owner = 1 THEN true END THEN UPDATE SET note = CASE WHEN src.n THEN 'a' END` + set + `
WHEN NOT MATCHED THEN DO NOTHING`},
		{"source is a join with its own ON", `MERGE INTO sessions s USING src a JOIN users u ON u.id = a.owner ON s.id = a.id WHEN MATCHED THEN DELETE`,
			`MERGE INTO "public".sessions s USING src a JOIN users u ON u.id = a.owner ON (s.id = a.id) AND ` + ls + ` WHEN MATCHED THEN DELETE`},
		{"source TTL table is a read", `MERGE INTO accounts a USING sessions s ON s.id = a.id WHEN MATCHED THEN UPDATE SET v = s.note`,
			`MERGE INTO accounts a USING ` + join(`"public".sessions s`, `"s"`, 0) + ` ON s.id = a.id WHEN MATCHED THEN UPDATE SET v = s.note`},
		{"source subquery", `MERGE INTO t USING (SELECT * FROM sessions) s ON t.id = s.id WHEN MATCHED THEN DELETE`,
			`MERGE INTO t USING (SELECT * FROM ` + join(`"public".sessions`, S, 0) + `) s ON t.id = s.id WHEN MATCHED THEN DELETE`},
		{"subquery in an action", `MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN UPDATE SET n = (SELECT count(*) FROM sessions)`,
			`MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN UPDATE SET n = (SELECT count(*) FROM ` + join(`"public".sessions`, S, 0) + `)`},
		{"target and source the same table", `MERGE INTO sessions t USING sessions s ON t.id = s.owner WHEN MATCHED THEN UPDATE SET note = s.note`,
			`MERGE INTO "public".sessions t USING ` + join(`"public".sessions s`, `"s"`, 0) + ` ON (t.id = s.owner) AND ` + live(`"t"`) + ` WHEN MATCHED THEN UPDATE SET note = s.note` + set},
		{"WITH and ONLY", `WITH x AS (SELECT id FROM sessions) MERGE INTO ONLY public.sessions USING x ON sessions.id = x.id WHEN MATCHED THEN DELETE`,
			`WITH x AS (SELECT id FROM ` + join(`"public".sessions`, S, 0) + `) MERGE INTO ONLY public.sessions USING x ON (sessions.id = x.id) AND ` + live(S) + ` WHEN MATCHED THEN DELETE`},
		{"NOT MATCHED BY SOURCE", `MERGE INTO sessions s USING src ON s.id = src.id WHEN NOT MATCHED BY SOURCE THEN DELETE WHEN NOT MATCHED BY SOURCE AND s.owner = 1 OR s.owner = 2 THEN UPDATE SET note = 'gone'`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN NOT MATCHED BY SOURCE AND ` + ls + ` THEN DELETE WHEN NOT MATCHED BY SOURCE AND (s.owner = 1 OR s.owner = 2) AND ` + ls + ` THEN UPDATE SET note = 'gone'` + set},
		{"RETURNING", `MERGE INTO sessions s USING src ON s.id = src.id WHEN MATCHED THEN UPDATE SET note = 'x' RETURNING merge_action(), s.id`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN MATCHED THEN UPDATE SET note = 'x'` + set + ` RETURNING merge_action(), s.id`},
		{"EXPLAIN and a trailing comment", "EXPLAIN MERGE INTO sessions s USING src ON s.id = src.id WHEN MATCHED THEN DELETE; -- x",
			`EXPLAIN MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + " WHEN MATCHED THEN DELETE; -- x"},
		{"derived per-row lifetime", `MERGE INTO jobs j USING src ON j.id = src.id WHEN MATCHED THEN UPDATE SET state = 'x' WHEN NOT MATCHED THEN INSERT (id) VALUES (src.id)`,
			`MERGE INTO "public".jobs j USING src ON (j.id = src.id) AND ` + ruleLive(t, "public.jobs", `"j"`) + ` WHEN MATCHED THEN UPDATE SET state = 'x', "ttl_seconds" = ` + testRule(t, "public.jobs").RefreshValue(`"j"`, 2*time.Hour) + ` WHEN NOT MATCHED THEN INSERT (id, "ttl_seconds") VALUES (src.id, 7200)`},
		{"no stamping without default ttl", `MERGE INTO events e USING src ON e.id = src.id WHEN NOT MATCHED THEN INSERT (id) VALUES (src.id)`,
			`MERGE INTO "public".events e USING src ON (e.id = src.id) AND ` + ruleLive(t, "public.events", `"e"`) + ` WHEN NOT MATCHED THEN INSERT (id) VALUES (src.id)`},
		{"other tables pass", `MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN DELETE`, ``},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
	}

	s := NewState(Session{Catalog: sessionsCatalog()})
	for _, c := range []rwCase{
		{"INSERT VALUES without a column list", `MERGE INTO sessions s USING src ON s.id = src.id WHEN NOT MATCHED THEN INSERT VALUES (src.id, src.owner)`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN NOT MATCHED THEN INSERT ("id", "owner", "expires_at") VALUES (src.id, src.owner, ` + stamp + `)`},
		{"values reach the expiry column", `MERGE INTO sessions s USING src ON s.id = src.id WHEN NOT MATCHED THEN INSERT VALUES (1, 2, 'a', NULL)`,
			`MERGE INTO "public".sessions s USING src ON (s.id = src.id) AND ` + ls + ` WHEN NOT MATCHED THEN INSERT VALUES (1, 2, 'a', NULL)`},
	} {
		checkRewrite(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"no column list without catalog", `MERGE INTO sessions s USING src ON s.id = src.id WHEN NOT MATCHED THEN INSERT VALUES (src.id)`,
			"0A000", []string{"public.sessions", "MERGE", "column list"}},
	} {
		checkReject(t, rw, nil, c)
	}
}
