# bash completion for pepsi and its pepsi-COMMAND links: commands, flags,
# and the stage names of the configuration (-c FILE, else $PEPSI_CONFIG,
# else /etc/pepsi/pepsi.conf) after --stage, --stages and --to-stage.
# The candidates come from the program itself: `pepsi __complete WORD...`
# (see pepsi(1), COMPLETION). Installed as
# /usr/share/bash-completion/completions/pepsi (and a link per alias), or
# sourced: . contrib/completion/pepsi.bash

_pepsi() {
	local i w cmd=${COMP_WORDS[0]} args=()
	[[ $cmd == "~/"* ]] && cmd=$HOME/${cmd#"~/"}
	for ((i = 1; i <= COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		# bash splits --stage=NAME at the "=": give pepsi --stage NAME.
		if [[ $w == = && ${COMP_WORDS[i - 1]} == -* ]]; then
			((i == COMP_CWORD)) && args+=("")
			continue
		fi
		args+=("$w")
	done
	mapfile -t COMPREPLY < <("$cmd" __complete "${args[@]}" 2>/dev/null)
}
complete -o default -F _pepsi pepsi pepsi-dispatch pepsi-enqueue pepsi-queue \
	pepsi-stats pepsi-migrate pepsi-httpd pepsi-doctor
