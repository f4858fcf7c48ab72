# Source this: a suite that runs longer than one shell session starts itself detached and is polled.
#   detached_start DIR NAME HINT SCRIPT [ARGS...]  run `bash SCRIPT ARGS` with nohup: its output in DIR/NAME.log,
#                                                  its pid in DIR/NAME.pid, its exit code in DIR/NAME.done at the end
#   detached_state DIR NAME                        one line: done (with the exit code), running, or not started
# HINT is the poll command printed for the user. A second start while one runs is refused (they would share files).
detached_start() {
    local dir=$1 name=$2 hint=$3
    shift 3
    if kill -0 "$(cat "$dir/$name.pid" 2>/dev/null)" 2>/dev/null; then
        echo "a $name is already running (pid $(cat "$dir/$name.pid")): poll it with $hint" >&2
        return 1
    fi
    rm -f "$dir/$name.done"
    nohup bash -c "bash $(printf '%q ' "$@") >'$dir/$name.log' 2>&1; echo \$? >'$dir/$name.done'" >/dev/null 2>&1 &
    echo $! >"$dir/$name.pid"
    echo "started (pid $!): log $dir/$name.log; poll with: $hint"
}

detached_state() {
    local dir=$1 name=$2
    if [ -f "$dir/$name.done" ]; then echo "done: exit $(cat "$dir/$name.done")"
    elif kill -0 "$(cat "$dir/$name.pid" 2>/dev/null)" 2>/dev/null; then echo "running (pid $(cat "$dir/$name.pid"))"
    else echo "not started (or killed): no $dir/$name.done"; fi
}
