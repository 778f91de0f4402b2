#!/usr/bin/env bash
# banana.sh: sample a 2-d banana with Kameleon from bash, with several worker processes.
# Needs bash, curl, jq and awk.
#
#     KAMELEON_URL=http://127.0.0.1:8000 bash banana.sh
#
# Settings (environment):
#     KAMELEON_URL            the service (default http://127.0.0.1:8000)
#     KAMELEON_API_KEY        sent as X-API-Key when set
#     KAMELEON_SESSION        work on this existing session instead of creating one
#                             (how workers on other machines join a run)
#     KAMELEON_ALGORITHM      am (default), rwm, kameleon, kmc-lite, kmc-finite; or one
#                             that uses gradients, mala, hmc, nuts: each result then
#                             carries the banana's gradient (log_density_gradient). A
#                             worker that joins such a session names its algorithm too.
#     KAMELEON_OPTIONS        algorithm options as a JSON object (default: none)
#     KAMELEON_CHAINS         chains (default 4)
#     KAMELEON_ITERATIONS     draws kept per chain after warm-up (default 2000)
#     KAMELEON_WARMUP         warm-up iterations per chain (default 1000)
#     KAMELEON_SEED           seed (default 1)
#     KAMELEON_WORKERS        worker processes (default 2)
#     KAMELEON_MAX            proposals per request and worker (default chains / workers)
#     KAMELEON_LEASE_SECONDS  how long a worker holds its proposals (default: the service's)
#
# The target is the banana B(b, v) of Haario et al.: x ~ N(0, diag(v, 1)) twisted by
# y2 = x2 + b (x1^2 - v), cut off (log density -inf) outside the band
# |y2 - b (y1^2 - v)| <= band around its ridge. Its mean is 0 and Var y1 = v.
set -euo pipefail

URL=${KAMELEON_URL:-http://127.0.0.1:8000}
URL=${URL%/}
CHAINS=${KAMELEON_CHAINS:-4}
ITERATIONS=${KAMELEON_ITERATIONS:-2000}
WARMUP=${KAMELEON_WARMUP:-1000}
WORKERS=${KAMELEON_WORKERS:-2}
MAX=${KAMELEON_MAX:-$(((CHAINS + WORKERS - 1) / WORKERS))}
LEASE=${KAMELEON_LEASE_SECONDS:-}
ALGORITHM=${KAMELEON_ALGORITHM:-am}
case $ALGORITHM in
mala | hmc | nuts) GRADIENT=1 ;; # these need the gradient with every result
*) GRADIENT=0 ;;
esac

# The target: reads points, one a line (coordinates separated by blanks), and writes one
# log density a line, "-inf" outside the support. Your model goes here; for a program
# that takes one point as arguments:
#     log_density() { while read -r y1 y2; do ./my_model "$y1" "$y2"; done; }
B=0.03 V=25 BAND=4
log_density() {
    awk -v b="$B" -v v="$V" -v band="$BAND" '{
        u = $2 - b * ($1 * $1 - v)   # the untwisted second coordinate
        if (u > band || u < -band) print "-inf"
        else printf "%.17g\n", -0.5 * ($1 * $1 / v + u * u)
    }'
}

# The same, for the algorithms that use gradients: one line a point, the log density then
# its gradient ("value g1 g2"), or "-inf" alone outside the support. The service checks
# the gradient against finite differences at the first chain's initial point and stops
# the session, naming the coordinate, when it is wrong.
log_density_gradient() {
    awk -v b="$B" -v v="$V" -v band="$BAND" '{
        u = $2 - b * ($1 * $1 - v)
        if (u > band || u < -band) print "-inf"
        else printf "%.17g %.17g %.17g\n", -0.5 * ($1 * $1 / v + u * u), -$1 / v + 2 * b * $1 * u, -u
    }'
}

die() {
    echo "kameleon: $*" >&2
    exit 1
}

headers=(-H "Content-Type: application/json" -H "Accept: application/json")
[[ -n ${KAMELEON_API_KEY:-} ]] && headers+=(-H "X-API-Key: $KAMELEON_API_KEY")

# call PATH [BODY]: GET PATH, or POST BODY to it. Sets STATUS, ANSWER and REQUEST.
# Connection errors and 503 are retried with exponential backoff: every request of the
# protocol is safe to repeat (a re-told result answers "duplicate").
call() {
    local path=$1 backoff=0.1 wait attempt out code why
    REQUEST=$path
    local data=()
    [[ $# -gt 1 ]] && data=(--data-binary "$2")
    for ((attempt = 1; ; attempt++)); do
        code=0
        out=$(curl -s --connect-timeout 10 --max-time 120 -w '\n%{http_code}' \
            "${headers[@]}" "${data[@]}" "$URL$path") || code=$?
        STATUS=${out##*$'\n'}
        ANSWER=${out%$'\n'*}
        if ((code == 0)) && [[ $STATUS != 503 ]]; then
            return 0
        fi
        ((code == 0)) && why="503 service unavailable" || why="curl error $code"
        ((attempt < 10)) || die "$path: giving up after $attempt attempts ($why)"
        # Jitter, so that workers do not retry in step.
        wait=$(awk -v b="$backoff" -v r="$RANDOM" 'BEGIN { printf "%.2f", b * (0.5 + r / 65534) }')
        echo "kameleon: $path: $why; retrying in $wait s" >&2
        sleep "$wait"
        backoff=$(awk -v b="$backoff" 'BEGIN { b *= 2; print (b > 5 ? 5 : b) }')
    done
}

# expect STATUS: fail with the service's problem detail unless the answer has STATUS.
expect() {
    [[ $STATUS == "$1" ]] || die "$REQUEST: HTTP $STATUS: $(jq -r '.detail // .' <<<"$ANSWER" 2>/dev/null || echo "$ANSWER")"
}

# One worker: ask for proposals, evaluate them, tell the values while asking for the
# next ones (step), until the session is done.
worker() {
    local n=$1 session=$2 evaluations=0 outside=0 ask results value line i
    local done count stranded ids points values gradient evaluate=log_density
    ((GRADIENT)) && evaluate=log_density_gradient
    ask="{\"max\":$MAX${LEASE:+,\"lease_seconds\":$LEASE}}"
    # One jq for the whole run (starting jq costs more than the rest of a step): it reads
    # each answer and writes "done count stranded", then "id x1 x2 ..." per proposal.
    coproc PARSE {
        jq --unbuffered -r '([.done, (.proposals | length),
            ([.results[]? | select(.outcome == "outside_support") | .id] | join(",") | if . == "" then "-" else . end)] | @tsv),
            (.proposals[] | [.id] + .x | @tsv)'
    }
    call "/v1/sessions/$session/ask" "$ask"
    expect 200
    while :; do
        printf '%s\n' "$ANSWER" >&"${PARSE[1]}"
        IFS=$'\t' read -r done count stranded <&"${PARSE[0]}"
        ids=() points=""
        for ((i = 0; i < count; i++)); do
            IFS= read -r line <&"${PARSE[0]}"
            ids+=("${line%%$'\t'*}")
            points+="${line#*$'\t'}"$'\n'
        done
        [[ $stranded == - ]] || die "the initial point $stranded is outside the support; reset its chain"
        [[ $done == true ]] && break
        if ((count == 0)); then
            # Every unfinished chain is leased to another worker: wait, then ask again.
            sleep 0.1
            call "/v1/sessions/$session/ask" "$ask"
            expect 200
            continue
        fi
        # Every kind of proposal (init, proposal, and the leapfrog and gradient_check points
        # within a transition of a gradient sampler) is evaluated the same way.
        mapfile -t values < <(printf '%s' "$points" | "$evaluate")
        ((${#values[@]} == count)) || die "$evaluate wrote ${#values[@]} values for $count points"
        results=""
        for i in "${!ids[@]}"; do
            read -r value gradient <<<"${values[i]}"
            case $value in
            -inf | -Infinity) # outside the support: JSON has no infinity
                value=null
                outside=$((outside + 1))
                ;;
            "" | *[!-+.0-9eE]*) die "log density '$value' at ${ids[i]} is not a number" ;;
            esac
            if ((GRADIENT)) && [[ $value != null ]]; then
                [[ -n $gradient ]] || die "no gradient at ${ids[i]}"
                gradient="\"gradient\":[${gradient// /,}]"
                results+="${results:+,}{\"id\":\"${ids[i]}\",\"log_density\":$value,$gradient}"
            else
                results+="${results:+,}{\"id\":\"${ids[i]}\",\"log_density\":$value}"
            fi
        done
        evaluations=$((evaluations + count))
        # Tell the values and ask for the next proposals in one round trip.
        call "/v1/sessions/$session/step" "{\"results\":[$results],${ask#\{}"
        while [[ $STATUS == 409 ]]; do
            # Another worker told some of these first (our lease had run out): drop the
            # ids the service names and send the rest.
            line=$(jq -c --arg results "[$results]" '.ids as $ids
                | $results | fromjson | map(select(.id | IN($ids[]) | not)) | .[] ' <<<"$ANSWER" |
                paste -s -d, -)
            [[ $line != "$results" ]] || break
            echo "kameleon: $(jq -c '.ids' <<<"$ANSWER") answered by another worker; dropped" >&2
            results=$line
            call "/v1/sessions/$session/step" "{\"results\":[$results],${ask#\{}"
        done
        expect 200
    done
    echo "worker $n: $evaluations log densities, $outside outside the support"
}

if [[ -n ${KAMELEON_SESSION:-} ]]; then
    SESSION=$KAMELEON_SESSION
else
    # Start the chains on the ridge, spread over +-1.5 sd of y1.
    body=$(jq -cn --arg algorithm "$ALGORITHM" --argjson chains "$CHAINS" \
        --argjson warmup "$WARMUP" --argjson iterations "$ITERATIONS" \
        --argjson seed "${KAMELEON_SEED:-1}" --argjson options "${KAMELEON_OPTIONS:-{\}}" \
        --argjson b "$B" --argjson v "$V" '
        {algorithm: $algorithm, dim: 2, chains: $chains, warmup: $warmup,
         max_iterations: ($warmup + $iterations), seed: $seed, options: $options,
         initial: [range($chains) as $c
                   | (if $chains > 1 then 1.5 * ($v | sqrt) * (2 * $c / ($chains - 1) - 1) else 0 end)
                   | [., $b * (. * . - $v)]]}')
    call /v1/sessions "$body"
    expect 201
    SESSION=$(jq -r .id <<<"$ANSWER")
fi
echo "session $SESSION"

pids=()
for ((w = 0; w < WORKERS; w++)); do
    worker "$w" "$SESSION" &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
    wait "$pid" || failed=$((failed + 1))
done
((failed == 0)) || die "$failed of $WORKERS workers failed"

call "/v1/sessions/$SESSION/diagnostics"
expect 200
if [[ $(jq .draws <<<"$ANSWER") -lt 1 ]]; then
    echo "no draws after warm-up yet: nothing to summarise (KAMELEON_ITERATIONS counts the draws kept after warm-up)"
    exit 0
fi
printf "%-10s %10s %10s %10s %10s %8s\n" parameter mean sd mcse_mean ess_bulk r_hat
jq -r '.parameters[] | [.name, .mean, .sd, .mcse_mean, .ess_bulk, .r_hat] | map(. // "nan") | @tsv' <<<"$ANSWER" |
    while IFS=$'\t' read -r name mean sd mcse ess rhat; do
        printf "%-10s %10.4f %10.4f %10.4f %10.1f %8.4f\n" "$name" "$mean" "$sd" "$mcse" "$ess" "$rhat"
    done
# The warnings, one line per kind with the parameters and chains it concerns.
jq -r '.warnings | group_by(.code)[]
    | ([.[] | .parameter // (if .chain == null then empty else "chain \(.chain)" end)] | unique) as $on
    | "warning [\(.[0].code)]" + (if ($on | length) > 0 then " on " + ($on | join(", ")) else "" end)
      + ": " + .[0].message + (if length > 1 then " (and \(length - 1) more)" else "" end)' <<<"$ANSWER"
if [[ $(jq '.warnings | length' <<<"$ANSWER") -gt 0 ]]; then
    echo "    try: a longer run (KAMELEON_WARMUP, KAMELEON_ITERATIONS); the README, \"Has it converged?\", says what each warning means"
fi
