-- Schema version 2: node leases, shard ownership and fenced writes (issue 42).
--
-- A node registers a lease (`foya_nodes`) that it renews; every time is the database's
-- clock (`clock_timestamp()`), never a client's. A node owns a shard by bumping the
-- shard's epoch (`foya_claim`), allowed only while no other live lease owns it. Every
-- write of a session (`foya_append`: events, the recovery index, the summary, titles,
-- deletion) and a fenced attachment (`foya_fence_ok`) checks in its own statement that
-- the shard's epoch is still the writer's and that its owner's lease is live.

-- One row per node name: the lease of the process that holds the name now. `lease` is
-- fresh on every registration (a restarted node, or one whose lease expired, gets a new
-- one), so an expired lease never comes back to life.
CREATE TABLE foya_nodes (
    node text PRIMARY KEY,
    lease uuid NOT NULL UNIQUE,
    -- Where the node is reached (its cluster or HTTP address), for forwarding.
    address text,
    ttl_ms bigint NOT NULL CHECK (ttl_ms > 0),
    registered_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

-- A shard's owner is the lease that claimed it (`owner` is its node's name, for
-- messages); NULL once released. The epoch only grows.
ALTER TABLE foya_shards
    ADD COLUMN owner_lease uuid,
    ADD COLUMN claimed_at timestamptz;

INSERT INTO foya_shards (shard, epoch)
    SELECT g, 0 FROM generate_series(
        0, (SELECT value::integer FROM foya_meta WHERE key = 'shards') - 1) AS g
    ON CONFLICT (shard) DO NOTHING;

COMMENT ON COLUMN foya_events.epoch IS
    'the shard epoch the event was written under: the fence''s, or for an unfenced write '
    '(allowed only while no live lease owns the shard) the shard''s epoch then; it never '
    'decreases along a session''s seqs';

-- Whether `p_shard` is at `p_epoch` and owned by a live lease; locks the shard's row FOR
-- SHARE until the end of the caller's transaction (a claim waits for it).
CREATE FUNCTION foya_fence_ok(p_shard integer, p_epoch bigint) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    cur_epoch bigint;
    cur_lease uuid;
BEGIN
    SELECT sh.epoch, sh.owner_lease INTO cur_epoch, cur_lease
        FROM foya_shards sh WHERE sh.shard = p_shard FOR SHARE;
    IF NOT FOUND OR cur_epoch <> p_epoch OR cur_lease IS NULL THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT 1 FROM foya_nodes nd
                   WHERE nd.lease = cur_lease AND nd.expires_at > clock_timestamp());
END
$fn$;

-- A claim of `p_shard` by the live lease `p_lease` of node `p_node`. Codes: 0 claimed
-- (the epoch was bumped: `r_epoch`), 1 already held by this lease (`r_epoch`), 2 held by
-- another live lease (`r_owner`, and `r_ms` until its lease expires unless renewed),
-- 3 this lease is not live (expired, or replaced), 4 no such shard.
CREATE FUNCTION foya_claim(p_shard integer, p_node text, p_lease uuid)
RETURNS TABLE (r_code smallint, r_epoch bigint, r_owner text, r_ms bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    cur_epoch bigint;
    cur_owner text;
    cur_lease uuid;
    left_ms bigint;
BEGIN
    -- FOR UPDATE: concurrent claims of one shard are serialised, and a claim waits for
    -- the appends that hold the shard FOR SHARE (they commit under the old epoch first).
    SELECT sh.epoch, sh.owner, sh.owner_lease INTO cur_epoch, cur_owner, cur_lease
        FROM foya_shards sh WHERE sh.shard = p_shard FOR UPDATE;
    IF NOT FOUND THEN
        r_code := 4;
        RETURN NEXT;
        RETURN;
    END IF;
    r_epoch := cur_epoch;
    r_owner := cur_owner;
    -- A new statement, a new snapshot: the leases as they are now.
    IF NOT EXISTS (SELECT 1 FROM foya_nodes nd WHERE nd.node = p_node
                   AND nd.lease = p_lease AND nd.expires_at > clock_timestamp()) THEN
        r_code := 3;
        RETURN NEXT;
        RETURN;
    END IF;
    IF cur_lease = p_lease THEN
        r_code := 1;
        RETURN NEXT;
        RETURN;
    END IF;
    IF cur_lease IS NOT NULL THEN
        SELECT ceil(extract(epoch FROM (nd.expires_at - clock_timestamp())) * 1000)::bigint
            INTO left_ms
            FROM foya_nodes nd
            WHERE nd.lease = cur_lease AND nd.expires_at > clock_timestamp();
        IF FOUND THEN
            r_code := 2;
            r_ms := left_ms;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    UPDATE foya_shards SET epoch = foya_shards.epoch + 1, owner = p_node,
            owner_lease = p_lease, claimed_at = clock_timestamp()
        WHERE foya_shards.shard = p_shard
        RETURNING foya_shards.epoch INTO r_epoch;
    r_code := 0;
    r_owner := p_node;
    RETURN NEXT;
END
$fn$;

DROP FUNCTION foya_append(uuid[], integer[], bigint[], integer[], integer[], bigint[],
    boolean[], text[], text[], text[], bigint[], bigint[], bytea[], text[], boolean[],
    smallint[], uuid[]);

-- One group commit (see version 1), now fenced and sharded. Per append j, in addition:
-- its session's parent (a sub-agent's child is recorded in its parent's shard), and
-- `a_shard` is the hash shard of the session (used for a new session without a known
-- parent). Every append, fenced or not, first finds its session's shard:
--   fenced (a_fence_shard, a_fence_epoch): commits only while the fence's shard is at
--     that epoch and its owner's lease is live (else code 4, `r_expected` the shard's
--     epoch now, `r_shard` the fence's shard), and the fence's shard is the session's
--     (else code 6, `r_shard` the session's shard); events record the fence's epoch;
--   unfenced: commits only while no live lease owns the session's shard (else code 4,
--     `r_shard` the session's shard); events record the shard's epoch.
-- Every shard the batch touches is locked FOR SHARE first, in shard order, before any
-- session row (FOR UPDATE, in session order): a claim (one shard row) waits for the
-- batches holding its shard, and no lock cycle forms.
CREATE FUNCTION foya_append(
    a_session uuid[], a_shard integer[], a_parent uuid[], a_first bigint[],
    a_count integer[], a_fence_shard integer[], a_fence_epoch bigint[],
    a_created boolean[], a_cwd text[], a_model text[], a_title text[],
    e_seq bigint[], e_at bigint[], e_body bytea[], e_title text[], e_deleted boolean[],
    e_pkind smallint[], e_pitem uuid[])
RETURNS TABLE (r_append integer, r_code smallint, r_expected bigint, r_shard integer)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(a_session, 1), 0);
    pos integer := 1;
    lo integer;
    hi integer;
    t_shard integer;
    known boolean;
    creating boolean;
    cur_epoch bigint;
    cur_live boolean;
    used_epoch bigint;
    s_last bigint;
    s_deleted boolean;
    refused boolean;
    new_title text;
BEGIN
    PERFORM 1 FROM foya_shards sh
        WHERE sh.shard IN (
            SELECT f.x FROM unnest(a_fence_shard) AS f(x) WHERE f.x IS NOT NULL
            UNION
            SELECT coalesce(s.shard, p.shard, a.h)
                FROM unnest(a_session, a_parent, a_shard) AS a(sid, pid, h)
                LEFT JOIN foya_sessions s ON s.session = a.sid
                LEFT JOIN foya_sessions p ON p.session = a.pid)
        ORDER BY sh.shard
        FOR SHARE;
    FOR j IN 1..n LOOP
        lo := pos;
        hi := pos + a_count[j] - 1;
        pos := hi + 1;
        r_append := j;
        r_expected := NULL;
        r_shard := NULL;
        -- The session's shard: recorded; for a new one, its parent's, else its hash.
        SELECT s.shard INTO t_shard FROM foya_sessions s WHERE s.session = a_session[j];
        known := FOUND;
        creating := NOT known AND a_created[j] AND a_first[j] = 1;
        IF creating THEN
            t_shard := NULL;
            IF a_parent[j] IS NOT NULL THEN
                SELECT p.shard INTO t_shard FROM foya_sessions p
                    WHERE p.session = a_parent[j];
            END IF;
            t_shard := coalesce(t_shard, a_shard[j]);
            known := true;
        END IF;
        used_epoch := 0;
        IF a_fence_shard[j] IS NOT NULL THEN
            SELECT sh.epoch, (sh.owner_lease IS NOT NULL AND EXISTS (
                        SELECT 1 FROM foya_nodes nd WHERE nd.lease = sh.owner_lease
                        AND nd.expires_at > clock_timestamp()))
                INTO cur_epoch, cur_live
                FROM foya_shards sh WHERE sh.shard = a_fence_shard[j] FOR SHARE;
            IF NOT FOUND OR cur_epoch <> a_fence_epoch[j] OR NOT cur_live THEN
                r_code := 4;
                r_expected := cur_epoch;
                r_shard := a_fence_shard[j];
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF known AND t_shard <> a_fence_shard[j] THEN
                r_code := 6;
                r_shard := t_shard;
                RETURN NEXT;
                CONTINUE;
            END IF;
            used_epoch := cur_epoch;
        ELSIF known THEN
            SELECT sh.epoch, (sh.owner_lease IS NOT NULL AND EXISTS (
                        SELECT 1 FROM foya_nodes nd WHERE nd.lease = sh.owner_lease
                        AND nd.expires_at > clock_timestamp()))
                INTO cur_epoch, cur_live
                FROM foya_shards sh WHERE sh.shard = t_shard FOR SHARE;
            IF FOUND THEN
                IF cur_live THEN
                    r_code := 4;
                    r_expected := cur_epoch;
                    r_shard := t_shard;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                used_epoch := cur_epoch;
            END IF;
        END IF;
        -- Dense inside the append, and nothing after a session_deleted in it.
        refused := false;
        FOR k IN lo..hi LOOP
            IF e_seq[k] <> a_first[j] + (k - lo) THEN
                r_code := 1;
                r_expected := a_first[j] + (k - lo);
                refused := true;
                EXIT;
            END IF;
            IF k < hi AND e_deleted[k] THEN
                r_code := 2;
                refused := true;
                EXIT;
            END IF;
        END LOOP;
        IF refused THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF creating THEN
            INSERT INTO foya_sessions (session, shard, cwd, model, title, created_at_ms,
                                       updated_at_ms, last_seq, deleted)
                VALUES (a_session[j], t_shard, a_cwd[j], a_model[j], a_title[j],
                        e_at[lo], e_at[lo], 0, false)
                ON CONFLICT (session) DO NOTHING;
        END IF;
        SELECT s.last_seq, s.deleted INTO s_last, s_deleted FROM foya_sessions s
            WHERE s.session = a_session[j] FOR UPDATE;
        IF NOT FOUND THEN
            IF a_created[j] THEN
                r_code := 1;
                r_expected := 1;
            ELSE
                r_code := 3;
            END IF;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF s_deleted THEN
            r_code := 2;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF a_first[j] <> s_last + 1 THEN
            r_code := 1;
            r_expected := s_last + 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        INSERT INTO foya_events (session, seq, epoch, at_ms, body)
            SELECT a_session[j], e_seq[g.x], used_epoch, e_at[g.x], e_body[g.x]
            FROM generate_series(lo, hi) AS g(x);
        new_title := NULL;
        FOR k IN lo..hi LOOP
            IF e_title[k] IS NOT NULL THEN
                new_title := e_title[k];
            END IF;
            CASE e_pkind[k]
                WHEN 1 THEN
                    INSERT INTO foya_pending (session, kind, item)
                        VALUES (a_session[j], 1, e_pitem[k]) ON CONFLICT DO NOTHING;
                WHEN 2 THEN
                    DELETE FROM foya_pending
                        WHERE session = a_session[j] AND kind = 1 AND item = e_pitem[k];
                WHEN 3 THEN
                    DELETE FROM foya_pending
                        WHERE session = a_session[j] AND kind = 1 AND item = e_pitem[k];
                    INSERT INTO foya_pending (session, kind, item)
                        VALUES (a_session[j], 0, '00000000-0000-0000-0000-000000000000')
                        ON CONFLICT DO NOTHING;
                WHEN 4 THEN
                    DELETE FROM foya_pending WHERE session = a_session[j] AND kind = 0;
                WHEN 5 THEN
                    DELETE FROM foya_pending WHERE session = a_session[j];
                ELSE
                    NULL;
            END CASE;
        END LOOP;
        UPDATE foya_sessions SET
                last_seq = e_seq[hi],
                updated_at_ms = e_at[hi],
                title = coalesce(new_title, title),
                deleted = e_deleted[hi]
            WHERE session = a_session[j];
        r_code := 0;
        RETURN NEXT;
    END LOOP;
END
$fn$;
