# Shared by the scripts: a Postgres server for the service and the tests. Sourced.
#
# ensure_postgres sets PGHOST, PGPORT, PGUSER and PG_BASE_URL (a URL without a database
# name). With DATABASE_URL set, nothing is provisioned. Otherwise the server on
# 127.0.0.1:5432 is used when one answers; else a private server is started under
# .data/pg (Debian's postgresql, installed with apt when missing), run by the `postgres`
# user (or `nobody`) because the server refuses to run as root.

pg_answers() {
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

pg_bin_dir() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

ensure_pg_client() {
    local missing=()
    command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    if [ ${#missing[@]} -gt 0 ]; then
        as_root apt-get update -qq
        as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

ensure_postgres() {
    if [ -n "${DATABASE_URL:-}" ]; then
        PG_BASE_URL="${DATABASE_URL%/*}"
        ensure_pg_client
        return
    fi
    if pg_answers 127.0.0.1 5432; then
        export PGHOST=127.0.0.1 PGPORT=5432 PGUSER="${PGUSER:-postgres}"
    else
        start_private_postgres
    fi
    PG_BASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT"
    ensure_pg_client
}

start_private_postgres() {
    local port=55432 bin data log owner
    export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres
    if pg_answers 127.0.0.1 $port; then
        return
    fi
    bin="$(pg_bin_dir)"
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        as_root apt-get update -qq
        as_root apt-get install -y -qq postgresql >/dev/null
        bin="$(pg_bin_dir)"
    fi
    data="$PWD/.data/pg"
    mkdir -p "$data"
    if [ "$(id -u)" = 0 ]; then
        owner=postgres
        id postgres >/dev/null 2>&1 || owner=nobody
        chown -R "$owner" "$data"
        # The server's user must reach the folder; when the project lives somewhere it
        # cannot (a 0700 home), the data goes to a temporary folder instead.
        if ! runuser -u "$owner" -- test -w "$data"; then
            data="${TMPDIR:-/tmp}/slicesched-pg"
            mkdir -p "$data" && chown -R "$owner" "$data" && chmod 700 "$data"
        fi
        run_pg() { runuser -u "$owner" -- "$@"; }
    else
        run_pg() { "$@"; }
    fi
    chmod 700 "$data"
    log="$data.log"
    touch "$log" && { [ "$(id -u)" != 0 ] || chown "$owner" "$log"; }
    if [ ! -f "$data/PG_VERSION" ]; then
        run_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    run_pg "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $data -c max_connections=300" start >/dev/null
    echo "postgres: private server on 127.0.0.1:$port (data in $data)" >&2
}
