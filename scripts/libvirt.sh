# Starts virtlogd and libvirtd by hand (no systemd on the build machines) and stops them by PID.
# Sourced by scripts/test.sh; also usable by hand:
#   source scripts/libvirt.sh && libvirt_up && ... && libvirt_down
# libvirt_up exports CUMULO_LIBVIRT_URI=qemu:///system when the daemon answers, and
# CUMULO_LIBVIRT_TCP_URI=qemu+tcp://127.0.0.1:$CUMULO_LIBVIRT_TCP_PORT/system: the daemon it starts
# also listens on TCP, on loopback only, without authentication (the off-host launching tests
# reach it as a remote host), and with TLS on loopback (CUMULO_LIBVIRT_TLS_URI, port
# $CUMULO_LIBVIRT_TLS_PORT): its certificate and the CA that signs it and that it trusts for
# clients are made here (CUMULO_LIBVIRT_TLS_CA, CUMULO_LIBVIRT_TLS_CA_KEY: the tests' controller
# issues the off-host launchers' client certificates with that CA). A libvirtd that already
# answers is used as it is and left running (only what this script started is stopped); the TCP
# and TLS URIs are exported only if they answer too.

CUMULO_LIBVIRT_PIDS=()
CUMULO_LIBVIRT_LOGS=""
CUMULO_LIBVIRT_TCP_PORT=${CUMULO_LIBVIRT_TCP_PORT:-16519}
CUMULO_LIBVIRT_TLS_PORT=${CUMULO_LIBVIRT_TLS_PORT:-16520}

# A throwaway CA (EC P-256, 2 days) and a server certificate for 127.0.0.1 signed by it, in $1.
libvirt_tls_files() {
    local d=$1
    mkdir -p "$d" && chmod 700 "$d" || return 1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=cumulo test launcher CA" -keyout "$d/cakey.pem" -out "$d/cacert.pem" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        >/dev/null 2>&1 || return 1
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=127.0.0.1" -keyout "$d/serverkey.pem" -out "$d/server.csr" >/dev/null 2>&1 ||
        return 1
    printf '%s\n' 'subjectAltName=IP:127.0.0.1' 'basicConstraints=CA:FALSE' \
        'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' \
        >"$d/server.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/cacert.pem" -CAkey "$d/cakey.pem" \
        -CAcreateserial -days 2 -extfile "$d/server.ext" -out "$d/servercert.pem" >/dev/null 2>&1
}

# The QEMU driver refuses to load without these (Debian's packages make them under systemd).
libvirt_accounts() {
    getent group kvm >/dev/null || groupadd --system kvm
    getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
    getent passwd libvirt-qemu >/dev/null ||
        useradd --system --gid libvirt-qemu --groups kvm --home-dir /var/lib/libvirt \
            --no-create-home --shell /usr/sbin/nologin libvirt-qemu
    # What udev does on a Debian host: /dev/kvm for group kvm. Without it libvirtd probes QEMU
    # as root (KVM found), then finds KVM unusable for the qemu user, judges its capability
    # cache stale and probes again on every domain definition (~40 s each on 2 busy cores).
    # Domains still run under TCG when the agent says so (--accel tcg, or auto on a VM).
    if [ -c /dev/kvm ] && [ "$(stat -c %G /dev/kvm)" = root ]; then
        chgrp kvm /dev/kvm && chmod 660 /dev/kvm
    fi
}

# Polls `what` (a command) until it succeeds, for at most $2 seconds.
libvirt_wait() {
    local what=$1 limit=$2 start=$SECONDS
    until eval "$what" >/dev/null 2>&1; do
        if [ $((SECONDS - start)) -ge "$limit" ]; then return 1; fi
        sleep 0.2
    done
}

libvirt_up() {
    local tcp="qemu+tcp://127.0.0.1:$CUMULO_LIBVIRT_TCP_PORT/system"
    if virsh -c qemu:///system version >/dev/null 2>&1; then
        echo "libvirtd already answers: using it"
        export CUMULO_LIBVIRT_URI=qemu:///system
        if virsh -c "$tcp" version >/dev/null 2>&1; then
            export CUMULO_LIBVIRT_TCP_URI=$tcp
        fi
        return 0
    fi
    libvirt_accounts
    CUMULO_LIBVIRT_LOGS=$(mktemp -d /tmp/cumulo-libvirt-logs.XXXXXX)
    mkdir -p /run/libvirt /var/lib/libvirt/qemu /var/log/libvirt/qemu
    if ! pgrep -x virtlogd >/dev/null; then
        # A socket left by a virtlogd that was killed would pass the readiness check at once.
        rm -f /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock
        virtlogd >"$CUMULO_LIBVIRT_LOGS/virtlogd.log" 2>&1 &
        CUMULO_LIBVIRT_PIDS+=($!)
        libvirt_wait "test -S /run/libvirt/virtlogd-sock" 20 || {
            echo "virtlogd did not start: $CUMULO_LIBVIRT_LOGS/virtlogd.log" >&2
            return 1
        }
    fi
    # TCP on loopback only, no authentication, and TLS on loopback with client certificates:
    # for the off-host tests (qemu+tcp and qemu+tls URIs).
    printf '%s\n' 'listen_tcp = 1' 'listen_addr = "127.0.0.1"' \
        "tcp_port = \"$CUMULO_LIBVIRT_TCP_PORT\"" 'auth_tcp = "none"' \
        >"$CUMULO_LIBVIRT_LOGS/libvirtd.conf"
    local pki="$CUMULO_LIBVIRT_LOGS/tls" tls=""
    if libvirt_tls_files "$pki"; then
        tls="qemu+tls://127.0.0.1:$CUMULO_LIBVIRT_TLS_PORT/system"
        printf '%s\n' 'listen_tls = 1' "tls_port = \"$CUMULO_LIBVIRT_TLS_PORT\"" 'auth_tls = "none"' \
            "key_file = \"$pki/serverkey.pem\"" "cert_file = \"$pki/servercert.pem\"" \
            "ca_file = \"$pki/cacert.pem\"" >>"$CUMULO_LIBVIRT_LOGS/libvirtd.conf"
    else
        echo "no TLS for libvirtd: its certificates could not be made (openssl)" >&2
        echo 'listen_tls = 0' >>"$CUMULO_LIBVIRT_LOGS/libvirtd.conf"
    fi
    libvirtd --listen --config "$CUMULO_LIBVIRT_LOGS/libvirtd.conf" \
        >"$CUMULO_LIBVIRT_LOGS/libvirtd.log" 2>&1 &
    CUMULO_LIBVIRT_PIDS+=($!)
    if ! libvirt_wait "virsh -c qemu:///system version" 60; then
        echo "libvirtd did not answer within 60 s:" >&2
        tail -n 30 "$CUMULO_LIBVIRT_LOGS/libvirtd.log" >&2
        return 1
    fi
    echo "libvirtd up (pids ${CUMULO_LIBVIRT_PIDS[*]}, logs in $CUMULO_LIBVIRT_LOGS, TCP $tcp)"
    export CUMULO_LIBVIRT_URI=qemu:///system
    if libvirt_wait "virsh -c $tcp version" 20; then
        export CUMULO_LIBVIRT_TCP_URI=$tcp
    else
        echo "libvirtd does not answer on $tcp" >&2
    fi
    # virsh as a TLS client needs a client certificate: one from the same CA, for the check.
    if [ -n "$tls" ] && libvirt_tls_client "$pki" "$pki/client" &&
        libvirt_wait "virsh -c '$tls?pkipath=$pki/client' version" 20; then
        export CUMULO_LIBVIRT_TLS_URI=$tls CUMULO_LIBVIRT_TLS_CA=$pki/cacert.pem \
            CUMULO_LIBVIRT_TLS_CA_KEY=$pki/cakey.pem
    elif [ -n "$tls" ]; then
        echo "libvirtd does not answer on $tls" >&2
    fi
}

# A client certificate from the CA in $1, in libvirt's pkipath layout in $2.
libvirt_tls_client() {
    local ca=$1 d=$2
    mkdir -p "$d" && cp "$ca/cacert.pem" "$d/cacert.pem" || return 1
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=cumulo test client" -keyout "$d/clientkey.pem" -out "$d/client.csr" \
        >/dev/null 2>&1 || return 1
    printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
        'extendedKeyUsage=clientAuth' >"$d/client.ext"
    openssl x509 -req -in "$d/client.csr" -CA "$ca/cacert.pem" -CAkey "$ca/cakey.pem" \
        -CAcreateserial -days 2 -extfile "$d/client.ext" -out "$d/clientcert.pem" >/dev/null 2>&1
}

# Stops what libvirt_up started, by PID, newest first.
libvirt_down() {
    local i pid
    for ((i = ${#CUMULO_LIBVIRT_PIDS[@]} - 1; i >= 0; i--)); do
        pid=${CUMULO_LIBVIRT_PIDS[$i]}
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    CUMULO_LIBVIRT_PIDS=()
}
