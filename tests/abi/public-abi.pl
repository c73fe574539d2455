#!/usr/bin/perl
# SPDX-License-Identifier: BSD-3-Clause
# public-abi.pl IN.dump OUT.dump HEADER... — narrow an abi-dumper dump of
# libnxl to what the public headers let a program see, for tests/abi_check.sh:
#
#  - a struct or union the headers only declare (nxl_agent, nxl_xfer, ...:
#    "struct nxl_agent;" and never "struct nxl_agent {") is opaque to
#    programs: its members and size, which DWARF knows from the library's
#    own sources, are dropped, so changing them is not an ABI change;
#  - types then reachable from no exported symbol are dropped;
#  - what depends on the build, not on the ABI, is emptied: the libraries
#    and undefined symbols of the transports built in (configure's choice),
#    the source files;
#  - written sorted, with a short indent (the reference is committed).
use strict;
use warnings;
use Data::Dumper;

my ($in, $out, @headers) = @ARGV;
die "usage: public-abi.pl IN.dump OUT.dump HEADER...\n" unless $out && @headers;
our $VAR1;
my $d = do($in =~ m{^/} ? $in : "./$in");
die "public-abi.pl: cannot read $in: " . ($@ || $!) . "\n" unless ref $d eq 'HASH';

my (%declared, %defined);
for my $h (@headers) {
    open(my $f, '<', $h) or die "public-abi.pl: $h: $!\n";
    local $/;
    my $s = <$f>;
    close $f;
    $s =~ s{/\*.*?\*/}{}gs;    # comments
    $s =~ s{//[^\n]*}{}g;
    $declared{"$1 $2"} = 1 while $s =~ /\b(struct|union)\s+(\w+)/g;
    $defined{"$1 $2"}  = 1 while $s =~ /\b(struct|union)\s+(\w+)\s*\{/g;
}

my $types = $d->{TypeInfo};
my (@opaque, %opaque_id);
for my $id (keys %$types) {
    my $t = $types->{$id};
    next unless ($t->{Type} // '') =~ /^(Struct|Union)$/;
    my $n = $t->{Name} // '';
    next unless $declared{$n} && !$defined{$n};
    %$t = (Name => $n, Type => $t->{Type});
    push @opaque, $n;
    $opaque_id{$id} = 1;
}
# and the typedefs naming them (nxl_agent_t) lose the size DWARF gave them
for my $t (values %$types) {
    delete $t->{Size} if ($t->{Type} // '') eq 'Typedef' && $opaque_id{ $t->{BaseType} // '' };
}

# type ids a hash refers to, at any depth (BaseType, Return, Class, the
# 'type' of members and parameters)
sub refs {
    my ($x, $acc) = @_;
    return unless ref $x eq 'HASH';
    for my $k (keys %$x) {
        my $v = $x->{$k};
        if (ref $v) { refs($v, $acc) }
        elsif ($k =~ /^(BaseType|Return|Class|type)$/ && defined $v) { push @$acc, $v }
    }
}
my @todo;
refs($_, \@todo) for values %{ $d->{SymbolInfo} };
my %keep;
while (defined(my $id = pop @todo)) {
    next if $keep{$id}++ || !$types->{$id};
    refs($types->{$id}, \@todo);
}
my $before = keys %$types;
delete $types->{$_} for grep { !$keep{$_} } keys %$types;

$d->{$_} = {} for grep { exists $d->{$_} } qw(Needed UndefinedSymbols Sources);

$Data::Dumper::Indent   = 1;
$Data::Dumper::Sortkeys = 1;
open(my $o, '>', $out) or die "public-abi.pl: $out: $!\n";
print $o Dumper($d);
close $o or die "public-abi.pl: $out: $!\n";
printf STDERR "public-abi.pl: %d opaque (%s); %d of %d types kept\n",
    scalar @opaque, join(' ', sort @opaque), scalar(keys %$types), $before;
