# SPDX-License-Identifier: GPL-2.0
#
# Compares the observations of two peer-memory clients (the output of `conformance`) scenario by
# scenario, against the list of documented differences, and prints KTAP (one result per scenario)
# and a Markdown report.
#
#   awk -f compare.awk -v variant=switch -v report=FILE -v rca=0 -v rcb=0 \
#       differences README.md nvidia_peermem.obs peermem_rs.obs
#
# A difference is documented when a `diff` line of the differences file matches its scenario and
# key (globs) and both values ('*' any, '-' absent), and the README anchor it names exists. Any other
# difference fails its scenario. A scenario the reference was not run for must have a `finding` line.
# Written for busybox awk (the test VM has nothing else).

function glob_re(g) {
	gsub(/\./, "\\.", g)
	gsub(/\*/, ".*", g)
	gsub(/\?/, ".", g)
	return "^" g "$"
}

function value_ok(want, got) {
	return want == "*" || want == got
}

# "-" (not observed) of a counter's change is 0.
function num(v) {
	return v == "-" ? 0 : v + 0
}

# The peermem-rs column may also say "fewer": a smaller count than nvidia-peermem's (of pins, say).
function value_b_ok(want, va, vb) {
	if (want == "fewer")
		return num(vb) < num(va)
	return value_ok(want, vb)
}

# The index of the documented difference that explains key k of scenario s, or 0.
function explained(s, k, va, vb,    i) {
	for (i = 1; i <= ndiff; i++)
		if (s ~ dscen[i] && k ~ dkey[i] && value_ok(dva[i], va) && value_b_ok(dvb[i], va, vb))
			return i
	return 0
}

# Descriptions use '_' for spaces (the observation format has none); reasons are plain text.
function md_text(t, underscores_are_spaces) {
	gsub(/\|/, "\\\\|", t)
	if (underscores_are_spaces)
		gsub(/_/, " ", t)
	return t
}

function readme_link(anchor) {
	return "[" anchor "](../README.md#" anchor ")"
}

BEGIN {
	file = 0
	a = "nvidia_peermem"
	b = "peermem_rs"
}

FNR == 1 { file++ }

# The list of documented differences and findings.
file == 1 && /^[ \t]*#/ { next }
file == 1 && NF == 0 { next }
file == 1 && $1 == "diff" {
	ndiff++
	dscen_glob[ndiff] = $2
	dscen[ndiff] = glob_re($2)
	dkey_glob[ndiff] = $3
	dkey[ndiff] = glob_re($3)
	dva[ndiff] = $4
	dvb[ndiff] = $5
	danchor[ndiff] = $6
	r = $0
	for (i = 1; i <= 6; i++)
		sub(/^[ \t]*[^ \t]+/, "", r)
	sub(/^[ \t]+/, "", r)
	dreason[ndiff] = r
	next
}
file == 1 && $1 == "finding" {
	# finding SCENARIO TARGET ID text...
	r = $0
	for (i = 1; i <= 4; i++)
		sub(/^[ \t]*[^ \t]+/, "", r)
	sub(/^[ \t]+/, "", r)
	finding_id[$2, $3] = $4
	finding_text[$2, $3] = r
	next
}
file == 1 {
	printf "# differences: cannot parse line %d: %s\n", FNR, $0
	bad_list = 1
	next
}

# The README's anchors: <a id="..."></a>.
file == 2 {
	line = $0
	while (match(line, /id="[^"]+"/)) {
		anchors[substr(line, RSTART + 4, RLENGTH - 5)] = 1
		line = substr(line, RSTART + RLENGTH)
	}
	next
}

# Observations: S scenario description / O scenario key value / X scenario why / T, E.
file == 3 || file == 4 {
	t = file == 3 ? a : b
	if ($1 == "T")
		started[t] = 1
	else if ($1 == "E")
		finished[t] = 1
	else if ($1 == "S") {
		if (!($2 in known)) {
			known[$2] = 1
			order[++nscen] = $2
			d = $0
			sub(/^S[ \t]+[^ \t]+[ \t]*/, "", d)
			desc[$2] = d
		}
		ran[t, $2] = 1
	} else if ($1 == "X") {
		skipped[t, $2] = 1
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
	plan = nscen + 4
	print "1.." plan

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
				print "ok " n " " s " # SKIP not run against " who " here: " \
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
		undocumented = ""
		used = ""
		for (j = 1; j <= nkeys[s]; j++) {
			k = keys[s, j]
			va = ((a, s, k) in val) ? val[a, s, k] : "-"
			vb = ((b, s, k) in val) ? val[b, s, k] : "-"
			if (va == vb)
				continue
			e = explained(s, k, va, vb)
			if (e && !(danchor[e] in anchors)) {
				printf "# %s: %s: the README has no entry #%s\n", s, k, danchor[e]
				missing_anchor = 1
				e = 0
			}
			ndetail++
			dets[ndetail] = s
			detk[ndetail] = k
			detva[ndetail] = va
			detvb[ndetail] = vb
			dete[ndetail] = e
			if (!e) {
				undocumented = undocumented " " k "(" a "=" va "," b "=" vb ")"
				continue
			}
			used_entry[e] = 1
			if (index(" " used " ", " " danchor[e] " ") == 0)
				used = used (used == "" ? "" : " ") danchor[e]
		}
		if (undocumented != "") {
			print "not ok " n " " s ": undocumented difference:" undocumented
			result = "**different, undocumented**"
			fails++
		} else if (used != "") {
			print "ok " n " " s ": different, documented (" used ")"
			split(used, u, " ")
			result = "different:"
			for (x = 1; x in u; x++)
				result = result " " readme_link(u[x])
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
		print "ok " n " every documented difference has its entry in the README"
	else {
		print "not ok " n " a documented difference has no entry in the README, or the list does not parse"
		fails++
	}

	print "" > report
	if (ndetail) {
		print "Every observation that differs:" > report
		print "" > report
		print "| scenario | observation | nvidia-peermem | peermem-rs | why |" > report
		print "|---|---|---|---|---|" > report
		for (i = 1; i <= ndetail; i++) {
			e = dete[i]
			why = e ? md_text(dreason[e], 0) " (" readme_link(danchor[e]) ")" : "**UNDOCUMENTED**"
			printf "| `%s` | `%s` | `%s` | `%s` | %s |\n", dets[i], detk[i], detva[i], detvb[i], why > report
		}
		print "" > report
	}
	for (i = 1; i <= ndiff; i++)
		if (used_entry[i])
			printf "used: %s %s\n", dscen_glob[i], dkey_glob[i] > (report ".used")
	printf "%d scenarios, %d failed\n", nscen, fails > (report ".summary")
	exit fails ? 1 : 0
}
