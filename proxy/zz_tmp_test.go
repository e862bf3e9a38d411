package proxy
import ("testing"; "os"; "github.com/ttlproxy/ttlproxy/rewrite")
func TestZZDump(t *testing.T){ q := buildCatalogQueries([]rewrite.Rule{{Schema:"cq", Table:"items"}, {Table:"it'e\\ms"}}); os.WriteFile("/tmp/full.sql", q.full[5:len(q.full)-1], 0644) }
