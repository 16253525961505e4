# Sourced by CI (and by hand: `. .ci/postgres.sh`): starts a throwaway PostgreSQL server for
# the tests that need one, and stops it when the sourcing shell exits.
#
# The server binaries come from Debian's `postgresql` package (installed with apt when absent
# and this shell may). The cluster lives in a temp dir, listens on a free loopback port only,
# trusts local connections (nothing outside the machine can reach it) and is deleted at exit.
# PostgreSQL refuses to run as root: as root, the cluster belongs to `nobody`.
#
# Exports ARBOR_TEST_POSTGRES_URL (postgres://arbor@127.0.0.1:PORT/arbor) on success. When no
# server can be started it says so loudly and leaves the variable unset, so the tests that
# need it skip with their own message; under CI=true it fails instead (a CI run without
# PostgreSQL is not green), and so do those tests.

# arbor_pg_none: no server. Outside CI the tests skip (returns 0); under CI=true it fails.
arbor_pg_none() {
    if [ "${CI:-}" = true ]; then
        echo "postgres: CI=true, so this FAILS instead of skipping"
        return 1
    fi
}

arbor_pg_start() {
    local bin user port data log
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bin" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "postgres: installing Debian's postgresql package"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 || true
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    fi
    if [ -z "$bin" ]; then
        echo "postgres: NO POSTGRESQL SERVER: the PostgreSQL tests will skip"
        arbor_pg_none
        return
    fi
    arbor_pg_dir=$(mktemp -d)
    chmod 755 "$arbor_pg_dir"
    data="$arbor_pg_dir/data"
    log="$arbor_pg_dir/server.log"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if [ "$(id -u)" = 0 ]; then
        chown nobody "$arbor_pg_dir"
        user="runuser -u nobody --"
    else
        user=""
    fi
    if ! $user "$bin/initdb" -D "$data" -U arbor -A trust --no-sync -E UTF8 >"$arbor_pg_dir/initdb.log" 2>&1; then
        echo "postgres: NO POSTGRESQL SERVER (initdb failed): the PostgreSQL tests will skip"
        tail -n 5 "$arbor_pg_dir/initdb.log"
        arbor_pg_none
        return
    fi
    if ! $user "$bin/pg_ctl" -D "$data" -l "$log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $arbor_pg_dir -c max_connections=200" \
        start >/dev/null; then
        echo "postgres: NO POSTGRESQL SERVER (it did not start): the PostgreSQL tests will skip"
        tail -n 5 "$log"
        arbor_pg_none
        return
    fi
    arbor_pg_stop_cmd="$user $bin/pg_ctl -D $data -m immediate stop"
    trap 'arbor_pg_stop' EXIT
    $user "$bin/createdb" -h 127.0.0.1 -p "$port" -U arbor arbor
    export ARBOR_TEST_POSTGRES_URL="postgres://arbor@127.0.0.1:$port/arbor"
    echo "postgres: $("$bin/postgres" --version) on 127.0.0.1:$port"
}

arbor_pg_stop() {
    if [ -n "${arbor_pg_stop_cmd:-}" ]; then
        $arbor_pg_stop_cmd >/dev/null 2>&1 || true
        arbor_pg_stop_cmd=""
    fi
    [ -n "${arbor_pg_dir:-}" ] && rm -rf "$arbor_pg_dir"
    unset ARBOR_TEST_POSTGRES_URL
}

arbor_pg_start
