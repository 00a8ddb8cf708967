_offcputime() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="offcputime"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        offcputime)
            opts="-p -C -G -t -u -k -U -K -d -o -f -m -M -h -V --pid --children --from-exec --cgroup --tid --user-threads-only --kernel-threads-only --user-stacks-only --kernel-stacks-only --duration --every --every-follow --output --folded --ringbuf-mb --ready-file --prepare --activate --launched-at --prepared-file --activate-file --probe --probe-binary --min-block-time --max-block-time --state --stack-storage-size --wakers --wake-depth --max-threads --timeline --timeline-min --timeline-mb --no-objects --check-fingerprints --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -p)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cgroup)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -G)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -d)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --every)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --every-follow)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ringbuf-mb)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ready-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --prepare)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --activate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --launched-at)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --prepared-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --activate-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --probe)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --probe-binary)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-block-time)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -m)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-block-time)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -M)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --state)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stack-storage-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --wake-depth)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeline-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeline-mb)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _offcputime -o nosort -o bashdefault -o default offcputime
else
    complete -F _offcputime -o bashdefault -o default offcputime
fi
