# SPDX-License-Identifier: GPL-2.0
#
# Compares the observations of two peer-memory clients (the output of `conformance`) scenario by
# scenario, against the list of documented differences, and prints KTAP (one result per scenario)
# and a Markdown report.
#
#   awk -f compare.awk -v variant=switch -v run=switch -v host=no_memory_peers -v report=FILE \
#       -v rca=0 -v rcb=0 scenarios differences differences.md nvidia_peermem.obs peermem_rs.obs
#
# `scenarios` pins the scenarios of each run (`run`: switch, split or memory_peers; a "findings"
# run is not pinned). `differences` states each documented difference as a relation over named
# scenarios and keys, and says the rules this program holds it to: no globs and no wildcard values;
# no scenario and key named twice for one host (`host`: memory_peers or no_memory_peers); every
# difference named and seen as stated; and every entry's difference seen in each of its scenarios
# that ran against both modules. The anchor an entry names must exist in differences.md (the
# repository's docs/differences.md, installed beside this program).
# Written for busybox awk (the test VM has nothing else).

function bad(msg) {
	printf "# differences: line %d: %s\n", FNR, msg
	bad_list = 1
}

function numeric(v) {
	return v == "-" || v ~ /^-?[0-9]+$/
}

# "-" (not observed) of a counter's change is 0.
function num(v) {
	return v == "-" ? 0 : v + 0
}

# Does the pair (va, vb) satisfy what entry e states for key k?
function holds(e, k, va, vb) {
	if (eva[e, k] != "n")
		return eva[e, k] == va && evb[e, k] == vb
	if (!numeric(va) || !numeric(vb))
		return 0
	return num(vb) == num(va) + substr(evb[e, k], 2)
}

# Descriptions use '_' for spaces (the observation format has none); reasons are plain text.
function md_text(t, underscores_are_spaces) {
	gsub(/\|/, "\\|", t)
	if (underscores_are_spaces)
		gsub(/_/, " ", t)
	return t
}

function doc_link(anchor) {
	return "[" anchor "](differences.md#" anchor ")"
}

BEGIN {
	file = 0
	a = "nvidia_peermem"
	b = "peermem_rs"
	if (host != "memory_peers" && host != "no_memory_peers") {
		print "# compare.awk: -v host= must be memory_peers or no_memory_peers"
		bad_list = 1
	}
}

FNR == 1 { file++ }

# The pinned scenario list: RUN SCENARIO.
file == 1 && (/^[ \t]*#/ || NF == 0) { next }
file == 1 {
	pinned_any[$2] = 1
	if ($1 == run && !(($1, $2) in pinned)) {
		pinned[$1, $2] = 1
		pinned_order[++npinned] = $2
	}
	next
}

# The list of documented differences and findings.
file == 2 && (/^[ \t]*#/ || NF == 0) { next }
file == 2 && $1 == "set" {
	sets[$2] = ""
	for (i = 3; i <= NF; i++) {
		if (!($i in pinned_any))
			bad("set " $2 ": " $i " is not a scenario of `scenarios`")
		sets[$2] = sets[$2] " " $i
	}
	next
}
file == 2 && $1 == "diff" {
	e = ++ndiff
	dline[e] = FNR
	if ($2 != "both" && $2 != "memory_peers" && $2 != "no_memory_peers")
		bad("host " $2 " is not both, memory_peers or no_memory_peers")
	if (NF < 8)
		bad("diff HOST SCENARIOS KEYS NVIDIA-PEERMEM PEERMEM-RS ANCHOR reason...")
	dhost[e] = $2
	danchor[e] = $7
	r = $0
	for (i = 1; i <= 7; i++)
		sub(/^[ \t]*[^ \t]+/, "", r)
	sub(/^[ \t]+/, "", r)
	dreason[e] = r
	# The scenarios, @sets expanded.
	ns = split($3, tok, ",")
	nsc = 0
	for (i = 1; i <= ns; i++) {
		if (substr(tok[i], 1, 1) == "@") {
			if (!(substr(tok[i], 2) in sets)) {
				bad("no set " tok[i])
				continue
			}
			nm = split(sets[substr(tok[i], 2)], mem, " ")
			for (j = 1; j <= nm; j++)
				sc[++nsc] = mem[j]
		} else {
			if (!(tok[i] in pinned_any))
				bad(tok[i] " is not a scenario of `scenarios`")
			sc[++nsc] = tok[i]
		}
	}
	# The keys, and their values: one value for all, or a comma-separated value per key.
	nk = split($4, kk, ",")
	na = nk > 1 && index($5, ",") ? split($5, av, ",") : 0
	nb = nk > 1 && index($6, ",") ? split($6, bv, ",") : 0
	if ((na && na != nk) || (nb && nb != nk))
		bad("as many values as keys, or one value for all")
	for (j = 1; j <= nk; j++) {
		k = kk[j]
		eva[e, k] = na ? av[j] : $5
		evb[e, k] = nb ? bv[j] : $6
		if (k ~ /[*?]/ || eva[e, k] ~ /[*?]/ || evb[e, k] ~ /[*?]/)
			bad("no glob and no wildcard value: " k " " eva[e, k] " " evb[e, k])
		if (eva[e, k] == "n" && evb[e, k] !~ /^n[+-][0-9]+$/)
			bad("nvidia-peermem's 'n' needs peermem-rs's n+K or n-K")
		if (eva[e, k] != "n" && evb[e, k] ~ /^n[+-][0-9]+$/)
			bad("peermem-rs's n+K needs nvidia-peermem's 'n'")
		if (eva[e, k] == evb[e, k])
			bad(k ": the two values are the same")
	}
	# One entry per (host, scenario, key); those of this run's host, by scenario.
	hn = split(dhost[e] == "both" ? "memory_peers no_memory_peers" : dhost[e], hh, " ")
	for (i = 1; i <= nsc; i++)
		for (j = 1; j <= nk; j++)
			for (h = 1; h <= hn; h++) {
				if ((hh[h], sc[i], kk[j]) in owner) {
					bad(sc[i] " " kk[j] " is named by line " dline[owner[hh[h], sc[i], kk[j]]] " too")
					continue
				}
				owner[hh[h], sc[i], kk[j]] = e
				if (hh[h] == host)
					owned[sc[i], ++nowned[sc[i]]] = kk[j]
			}
	next
}
file == 2 && $1 == "finding" {
	# finding SCENARIO TARGET ID text...
	r = $0
	for (i = 1; i <= 4; i++)
		sub(/^[ \t]*[^ \t]+/, "", r)
	sub(/^[ \t]+/, "", r)
	finding_id[$2, $3] = $4
	finding_text[$2, $3] = r
	next
}
file == 2 {
	bad("cannot parse: " $0)
	next
}

# docs/differences.md's anchors: <a id="..."></a>.
file == 3 {
	line = $0
	while (match(line, /id="[^"]+"/)) {
		anchors[substr(line, RSTART + 4, RLENGTH - 5)] = 1
		line = substr(line, RSTART + RLENGTH)
	}
	next
}

# Observations: S scenario description / O scenario key value / X scenario why / T, E.
file == 4 || file == 5 {
	t = file == 4 ? a : b
	if ($1 == "T")
		started[t] = 1
	else if ($1 == "E")
		finished[t] = 1
	else if ($1 == "S" || $1 == "X") {
		if (!($2 in known)) {
			known[$2] = 1
			order[++nscen] = $2
		}
		if ($1 == "S") {
			d = $0
			sub(/^S[ \t]+[^ \t]+[ \t]*/, "", d)
			desc[$2] = d
			ran[t, $2] = 1
		} else
			delete ran[t, $2]
	} else if ($1 == "O") {
		if (substr($3, 1, 1) == "_") {
			info[t, $2, $3] = $4
			next
		}
		if (!(($2, $3) in haskey)) {
			haskey[$2, $3] = 1
			nkeys[$2]++
			keys[$2, nkeys[$2]] = $3
		}
		val[t, $2, $3] = $4
	}
	next
}

END {
	n = 0
	fails = 0
	print "TAP version 13"
	print "1.." nscen + 5

	n++
	if (started[a] && finished[a] && rca == 0)
		print "ok " n " " a ": every scenario ran"
	else {
		print "not ok " n " " a ": the scenarios did not all run (exit " rca ")"
		fails++
	}
	n++
	if (started[b] && finished[b] && rcb == 0)
		print "ok " n " " b ": every scenario ran"
	else {
		print "not ok " n " " b ": the scenarios did not all run (exit " rcb ")"
		fails++
	}
	n++
	if (run == "findings")
		print "ok " n " the scenarios are those of scenarios # SKIP not applicable: a findings run is the findings' scenarios only"
	else {
		odd = ""
		for (i = 1; i <= npinned; i++)
			if (!(pinned_order[i] in known))
				odd = odd " missing:" pinned_order[i]
		for (i = 1; i <= nscen; i++)
			if (!((run, order[i]) in pinned))
				odd = odd " unpinned:" order[i]
		if (npinned && odd == "")
			print "ok " n " the scenarios are the " npinned " that scenarios lists for " run
		else {
			print "not ok " n " the scenarios are not those scenarios lists for " run ":" odd
			fails++
		}
	}

	print "## VM variant `" variant "`" > report
	print "" > report
	print "| # | scenario | what it does | result | ms (nvidia-peermem / peermem-rs) |" > report
	print "|---|---|---|---|---|" > report
	ndetail = 0
	for (i = 1; i <= nscen; i++) {
		s = order[i]
		n++
		ms = (info[a, s, "_ms"] == "" ? "-" : info[a, s, "_ms"]) " / " \
		     (info[b, s, "_ms"] == "" ? "-" : info[b, s, "_ms"])
		if (!ran[a, s] || !ran[b, s]) {
			who = ran[a, s] ? b : a
			if ((s, who) in finding_id) {
				print "ok " n " " s " # SKIP not applicable: not run against " who " here: " \
				      finding_id[s, who] " (" finding_text[s, who] ")"
				result = "not compared here: " who " is not run (**" finding_id[s, who] "**, see Findings)"
			} else {
				print "not ok " n " " s ": not run against " who
				result = "**FAIL**: not run against " who
				fails++
			}
			printf "| %d | `%s` | %s | %s | %s |\n", i, s, md_text(desc[s], 1), result, ms > report
			continue
		}
		wrong = ""
		used = ""
		# Every difference: named, and as stated.
		for (j = 1; j <= nkeys[s]; j++) {
			k = keys[s, j]
			va = ((a, s, k) in val) ? val[a, s, k] : "-"
			vb = ((b, s, k) in val) ? val[b, s, k] : "-"
			if (va == vb)
				continue
			e = ((host, s, k) in owner) ? owner[host, s, k] : 0
			ndetail++
			dets[ndetail] = s
			detk[ndetail] = k
			detva[ndetail] = va
			detvb[ndetail] = vb
			dete[ndetail] = 0
			if (!e) {
				wrong = wrong " " k "(" a "=" va "," b "=" vb ": undocumented)"
				continue
			}
			if (!holds(e, k, va, vb)) {
				wrong = wrong " " k "(" a "=" va "," b "=" vb ": line " dline[e] " states " eva[e, k] " -> " evb[e, k] ")"
				continue
			}
			if (!(danchor[e] in anchors)) {
				printf "# %s: %s: docs/differences.md has no entry #%s\n", s, k, danchor[e]
				missing_anchor = 1
			}
			dete[ndetail] = e
			used_entry[e] = 1
			if (index(" " used " ", " " danchor[e] " ") == 0)
				used = used (used == "" ? "" : " ") danchor[e]
		}
		# Every difference an entry states for this scenario: seen.
		for (j = 1; j <= nowned[s]; j++) {
			k = owned[s, j]
			va = ((a, s, k) in val) ? val[a, s, k] : "-"
			vb = ((b, s, k) in val) ? val[b, s, k] : "-"
			if (va == vb)
				wrong = wrong " " k "(both " va ": line " dline[owner[host, s, k]] " states " \
					eva[owner[host, s, k], k] " -> " evb[owner[host, s, k], k] ")"
		}
		if (wrong != "") {
			print "not ok " n " " s ": not as documented:" wrong
			result = "**different, not as documented**"
			fails++
		} else if (used != "") {
			print "ok " n " " s ": different, documented (" used ")"
			split(used, u, " ")
			result = "different:"
			for (x = 1; x in u; x++)
				result = result " " doc_link(u[x])
		} else {
			print "ok " n " " s ": same"
			result = "same"
		}
		printf "| %d | `%s` | %s | %s | %s |\n", i, s, md_text(desc[s], 1), result, ms > report
	}

	# Our module must leave nothing behind, whatever the reference does.
	n++
	leaks = ""
	for (i = 1; i <= nscen; i++) {
		s = order[i]
		for (j = 1; j <= nkeys[s]; j++)
			# registered_clients says the module is loaded with its clients: not a leak.
			if (keys[s, j] ~ /^left\./ && keys[s, j] != "left.host.registered_clients" &&
			    ((b, s, keys[s, j]) in val))
				leaks = leaks " " s ":" keys[s, j] "=" val[b, s, keys[s, j]]
	}
	if (leaks == "")
		print "ok " n " " b ": nothing left behind after any scenario"
	else {
		print "not ok " n " " b ": left behind:" leaks
		fails++
	}
	n++
	if (!missing_anchor && !bad_list)
		print "ok " n " the differences list follows its rules, and every entry has its anchor in docs/differences.md"
	else {
		print "not ok " n " the differences list breaks its rules, or an entry has no anchor in docs/differences.md"
		fails++
	}

	print "" > report
	if (ndetail) {
		print "Every observation that differs, and the entry of `differences` that states it:" > report
		print "" > report
		print "| scenario | observation | nvidia-peermem | peermem-rs | line | why |" > report
		print "|---|---|---|---|---|---|" > report
		for (i = 1; i <= ndetail; i++) {
			e = dete[i]
			why = e ? md_text(dreason[e], 0) " (" doc_link(danchor[e]) ")" : "**NOT AS DOCUMENTED**"
			printf "| `%s` | `%s` | `%s` | `%s` | %s | %s |\n", dets[i], detk[i], detva[i], detvb[i],
			       e ? dline[e] : "-", why > report
		}
		print "" > report
	}
	for (i = 1; i <= ndiff; i++)
		if (used_entry[i])
			printf "used: %d\n", dline[i] > (report ".used")
	printf "%d scenarios, %d failed\n", nscen, fails > (report ".summary")
	exit fails ? 1 : 0
}
