# bash completion for pagetrace and every one of its tools (installed as
# share/bash-completion/completions/pagetrace, linked by each tool's name).
# What it offers is read from the tool's own --help when asked, so it
# cannot fall behind the tools: `pagetrace`'s verbs, each tool's and
# verb's long options, and after `--` the command to run and its files.

# The long options that `CMD... --help` prints.
_pagetrace_long_options()
{
	"$@" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}

# The verbs of `pagetrace --help` (two-space indented, then the help line).
_pagetrace_verbs()
{
	"$1" --help 2>/dev/null | sed -nE 's/^  ([a-z][a-z0-9-]*)  .*/\1/p'
}

_pagetrace()
{
	local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[0]} i
	local -a help=("$cmd")

	for ((i = 1; i < COMP_CWORD; i++)); do
		if [[ ${COMP_WORDS[i]} == -- ]]; then
			# The command to trace: a command name, then its files.
			if ((i + 1 == COMP_CWORD)); then
				mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
			else
				mapfile -t COMPREPLY < <(compgen -f -- "$cur")
			fi
			return
		fi
	done
	if [[ ${cmd##*/} == pagetrace ]]; then
		if ((COMP_CWORD == 1)); then
			mapfile -t COMPREPLY < <(compgen -W "$(_pagetrace_verbs "$cmd")" -- "$cur")
			return
		fi
		help=("$cmd" "${COMP_WORDS[1]}")
	fi
	if [[ $cur == -* ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$(_pagetrace_long_options "${help[@]}")" -- "$cur")
		return
	fi
	mapfile -t COMPREPLY < <(compgen -f -- "$cur")
}

complete -o filenames -F _pagetrace pagetrace pagecache startup-bench resolve-inodes \
	pagetrace-trace pagetrace-cachestat pagetrace-cachetop pagetrace-replay \
	pagetrace-launch pagetrace-readpage pagetrace-diskemu
