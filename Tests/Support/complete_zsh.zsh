# Usage: zsh -f capture.zsh FUNCTION_DIR OUTPUT_FILE 'partial command line'
# Drives an interactive zsh in a pseudo-terminal with the completion system loaded from
# FUNCTION_DIR, types the partial line and Tab, and writes the candidates offered (what the
# completion functions gave compadd) to OUTPUT_FILE, one a line.
zmodload zsh/zpty
zpty capture zsh -f -i
zpty -w capture "PS1=''; PROMPT=''; RPROMPT=''; fpath=(${(q)1} \$fpath); autoload -U compinit; compinit -u -D"
zpty -w capture "candidates_file=${(q)2}"
# compadd: record each candidate (calls that only compute, -O/-A/-D, are passed through).
zpty -w capture 'compadd() { if (( ${@[(I)-[OAD]]} )); then builtin compadd "$@"; return; fi; local -a hits; builtin compadd -A hits "$@"; print -rl -- $hits >> $candidates_file; builtin compadd "$@" }'
zpty -w capture 'complete-and-mark() { zle complete-word; print -n "@@do""ne@@" }; zle -N complete-and-mark; bindkey "^I" complete-and-mark'
zpty -n -w capture "$3"$'\t'
zpty -r capture output '*@@done@@*'
zpty -d capture
