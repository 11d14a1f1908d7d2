-- Foya's event log in PostgreSQL, schema version 1 (applied by `migrate.rs` in one
-- transaction, under an advisory lock, and recorded in `foya_schema`).

-- Fixed at creation: the number of shards sessions hash into (scale-out, issue 42).
CREATE TABLE foya_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO foya_meta (key, value) VALUES ('shards', '256');

-- One row per session: its summary, its last seq and whether it is deleted. Written in
-- the same statement as the events that change it; `last_seq` is what makes seqs dense.
CREATE TABLE foya_sessions (
    session uuid PRIMARY KEY,
    shard integer NOT NULL,
    cwd text NOT NULL,
    model text NOT NULL,
    title text,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL,
    last_seq bigint NOT NULL CHECK (last_seq >= 0),
    deleted boolean NOT NULL DEFAULT false
);
CREATE INDEX foya_sessions_recent ON foya_sessions (updated_at_ms DESC, session DESC);

-- The append-only log. `body` is foya-storage's versioned codec of the event (run id,
-- time, kind); `epoch` is the shard epoch it was written under (0: unfenced).
CREATE TABLE foya_events (
    session uuid NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 1),
    epoch bigint NOT NULL,
    at_ms bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (session, seq)
);

-- The recovery index: a row per queued input (kind 1, item: the input id) and per open
-- turn (kind 0, item: the nil uuid).
CREATE TABLE foya_pending (
    session uuid NOT NULL,
    kind smallint NOT NULL,
    item uuid NOT NULL,
    PRIMARY KEY (session, kind, item)
);

-- Shard ownership: a fenced append commits only while its shard's epoch is the one it
-- carries. Rows are written by the ownership layer (issue 42), not by appends.
CREATE TABLE foya_shards (
    shard integer PRIMARY KEY,
    owner text,
    epoch bigint NOT NULL DEFAULT 0
);

-- Image attachments (uploads, tools' images), readable by every node.
CREATE TABLE foya_attachments (
    id uuid PRIMARY KEY,
    media_type text NOT NULL,
    bytes bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One group commit: the appends of many sessions in ONE statement (run in autocommit, so
-- no client ever holds a transaction open). Per append j: its session, the session's
-- shard (for a new session), its first seq and event count, its fence (NULL: none) and,
-- when its first event is `session_created`, the summary's cwd, model and title. Per
-- event k (appends' events concatenated): seq, time, body, the title it sets (NULL:
-- none), whether it is `session_deleted`, and its recovery-index change (0 none,
-- 1 queued, 2 dropped, 3 turn started, 4 turn complete, 5 deleted; item: the input id).
--
-- Returns one row per append: code 0 committed, 1 seq mismatch (`expected`: the seq the
-- first event must have), 2 session deleted, 3 unknown session, 4 fenced (`expected`:
-- the shard's epoch now, NULL when it has none). A refused append writes nothing and
-- does not affect the others.
CREATE FUNCTION foya_append(
    a_session uuid[], a_shard integer[], a_first bigint[], a_count integer[],
    a_fence_shard integer[], a_fence_epoch bigint[],
    a_created boolean[], a_cwd text[], a_model text[], a_title text[],
    e_seq bigint[], e_at bigint[], e_body bytea[], e_title text[], e_deleted boolean[],
    e_pkind smallint[], e_pitem uuid[])
RETURNS TABLE (r_append integer, r_code smallint, r_expected bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    n integer := coalesce(array_length(a_session, 1), 0);
    pos integer := 1;
    lo integer;
    hi integer;
    cur_epoch bigint;
    used_epoch bigint;
    s_last bigint;
    s_deleted boolean;
    refused boolean;
    new_title text;
BEGIN
    FOR j IN 1..n LOOP
        lo := pos;
        hi := pos + a_count[j] - 1;
        pos := hi + 1;
        r_append := j;
        r_expected := NULL;
        used_epoch := 0;
        IF a_fence_shard[j] IS NOT NULL THEN
            -- FOR SHARE: a claim (UPDATE of the epoch) waits for this statement, and this
            -- statement sees the epoch a committed claim left.
            SELECT s.epoch INTO cur_epoch FROM foya_shards s
                WHERE s.shard = a_fence_shard[j] FOR SHARE;
            IF NOT FOUND OR cur_epoch <> a_fence_epoch[j] THEN
                r_code := 4;
                r_expected := cur_epoch;
                RETURN NEXT;
                CONTINUE;
            END IF;
            used_epoch := cur_epoch;
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
        IF a_created[j] AND a_first[j] = 1 THEN
            INSERT INTO foya_sessions (session, shard, cwd, model, title, created_at_ms,
                                       updated_at_ms, last_seq, deleted)
                VALUES (a_session[j], a_shard[j], a_cwd[j], a_model[j], a_title[j],
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
