# bash completion for gradprof: commands, each command's options, the values of --format,
# --measure, --forbid and --detectors, trace files (*.gptrace*, and directories), and after
# `gradprof run|compare [options] --` the program and its own arguments.
# Installed as share/bash-completion/completions/gradprof (loaded on demand by bash-completion);
# without bash-completion, `source` this file. tests/test_completion.sh keeps the option lists in
# step with each command's --help.

_gradprof_commands="run report diff check compare help"
_gradprof_recorder_opts="--stack-depth --no-stacks --min-stack-size --stack-sample --flush-ms --cuda --torch --no-torch"
_gradprof_categories="parameter input activation saved gradient optimizer_state autograd temporary other"
_gradprof_detectors="graph_without_grad forgot_no_grad growth_across_iterations param_grad_in_inference graph_escapes_inference autograd_error"

# The options of a command, and the values of --format.
_gradprof_options() {
    case $1 in
    run) echo "-o --output $_gradprof_recorder_opts -h --help" ;;
    report) echo "--format -o --output --top --measure --min --region --rules -h --help" ;;
    diff) echo "--format -o --output --top --rules --require-aligned --rank -h --help" ;;
    check) echo "--forbid --region --max-peak --max-growth --no-leaks --detectors --rules --baseline
                 --baseline-slack --allow-incomplete --allow-unclassified --format --junit -h --help" ;;
    compare) echo "-n --name --format -o --output --top --rules --ignore-stdout
                   $_gradprof_recorder_opts -h --help" ;;
    esac
}
_gradprof_formats() {
    case $1 in
    report) echo "text json html folded chrome pprof speedscope" ;;
    check) echo "text json" ;;
    diff | compare) echo "text json html" ;;
    esac
}

# COMPREPLY from a word list, for a comma-separated list value ("saved,gra" -> "saved,gradient").
_gradprof_list() {
    local cur=$1 words=$2 prefix=""
    [[ $cur == *,* ]] && prefix="${cur%,*},"
    local w
    COMPREPLY=()
    for w in $(compgen -W "$words" -- "${cur##*,}"); do
        COMPREPLY+=("$prefix$w")
    done
    [[ ${#COMPREPLY[@]} -gt 0 ]] && type compopt &>/dev/null && compopt -o nospace 2>/dev/null
}

# COMPREPLY: files (all, or traces only: *.gptrace, *.gptrace.N) and directories.
_gradprof_files() {
    local cur=$1 traces=$2 IFS=$'\n'
    type compopt &>/dev/null && compopt -o filenames 2>/dev/null
    if [[ -n $traces ]]; then
        COMPREPLY=($(compgen -d -- "$cur") $(compgen -f -X '!*.gptrace*' -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

_gradprof() {
    local cur prev words cword
    if declare -F _init_completion &>/dev/null; then
        _init_completion || return
    else
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD - 1]}
    fi

    local cmd="" at=0 i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
        -*) ;;
        *) cmd=${words[i]}; at=$i; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "-h --help --version" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$_gradprof_commands" -- "$cur"))
        fi
        return
    fi
    if [[ $cmd == help ]]; then
        [[ $cword -eq $((at + 1)) ]] && COMPREPLY=($(compgen -W "${_gradprof_commands% help}" -- "$cur"))
        return
    fi

    # run and compare: after `--` (or, for run, the first word that is no option) comes the
    # program, then its own arguments.
    if [[ $cmd == run || $cmd == compare ]]; then
        local j skip=""
        for ((j = at + 1; j < cword; j++)); do
            if [[ -n $skip ]]; then skip=""; continue; fi
            case ${words[j]} in
            --) break ;;
            -o | --output | -n | --name | --format | --top | --rules | --stack-depth | \
                --min-stack-size | --stack-sample | --flush-ms) skip=1 ;;
            -*) ;;
            *) [[ $cmd == run ]] && { j=$((j - 1)); break; } ;;
            esac
        done
        if [[ $j -lt $cword ]]; then
            if declare -F _command_offset &>/dev/null; then
                _command_offset $((j + 1))
            elif [[ $cword -eq $((j + 1)) ]]; then
                COMPREPLY=($(compgen -c -- "$cur"))
            else
                _gradprof_files "$cur"
            fi
            return
        fi
    fi

    case $prev in
    --format)
        COMPREPLY=($(compgen -W "$(_gradprof_formats "$cmd")" -- "$cur"))
        return ;;
    --measure)
        COMPREPLY=($(compgen -W "peak total count leaked" -- "$cur"))
        return ;;
    --forbid)
        _gradprof_list "$cur" "none $_gradprof_categories"
        return ;;
    --detectors)
        _gradprof_list "$cur" "all none $_gradprof_detectors"
        return ;;
    --rules)
        _gradprof_files "$cur"
        COMPREPLY+=($(compgen -W "none" -- "$cur"))
        return ;;
    -o | --output | --junit | -n | --name)
        _gradprof_files "$cur"
        return ;;
    --baseline)
        _gradprof_files "$cur" traces
        return ;;
    --top | --min | --region | --rank | --max-peak | --max-growth | --baseline-slack | \
        --stack-depth | --min-stack-size | --stack-sample | --flush-ms)
        return ;;
    esac

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_gradprof_options "$cmd")" -- "$cur"))
        return
    fi
    case $cmd in
    report | diff | check) _gradprof_files "$cur" traces ;;
    run | compare) # the program
        _gradprof_files "$cur"
        COMPREPLY+=($(compgen -c -- "$cur")) ;;
    esac
} &&
    complete -F _gradprof gradprof
