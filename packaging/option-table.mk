# The option-table rules the C tools share (docs/option-tables.md),
# included by packaging/c-tool.mk (launch, replay, diskemu) and by
# tracer/Makefile. A table is the one source of an argp table and key enum
# (a header in .output/, included by the file that parses the options) and
# of the OPTIONS sections of the man pages that show it.
OPTION_TABLE_AWK := ../packaging/option-table.awk

# $(call option_table_c,TABLE,FLAGS): the header of TABLE into $@; FLAGS
# may name it (-v table=NAME) and start its keys (-v base=0x200).
option_table_c = awk -v out=c $(2) -f $(OPTION_TABLE_AWK) $(1) > $@.tmp && mv $@.tmp $@

# $(call option_page,TABLES,PAGE): rewrite PAGE's sections between its
# BEGIN OPTIONS and END OPTIONS markers from TABLES; tests/test_manpages.py
# fails while a committed page differs.
option_page = awk -v out=page -f $(OPTION_TABLE_AWK) $(1) $(2) > $(2).tmp && \
	mv $(2).tmp $(2)
