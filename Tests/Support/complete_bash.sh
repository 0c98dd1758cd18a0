# Usage: bash complete_bash.sh COMPLETION_SCRIPT WORD... (the last word is the partial one)
# Loads a generated bash completion script, calls the function it registered for
# storebackup as bash would on Tab after the given words, and prints COMPREPLY, one a line.
source "$1"
shift
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
registered=$(complete -p storebackup) || exit 1
function=$(sed -E 's/.*-F ([^ ]+).*/\1/' <<<"$registered")
"$function" storebackup "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
