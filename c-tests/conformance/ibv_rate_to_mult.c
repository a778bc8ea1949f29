/* ibv_rate_to_mult(3) (and mult_to_ibv_rate): rate enum <-> multiple of 2.5 Gbit/s. */
#include "ibvhelp.h"

static const struct {
	enum ibv_rate rate;
	int mult;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 1 }, { IBV_RATE_5_GBPS, 2 },   { IBV_RATE_10_GBPS, 4 },  { IBV_RATE_20_GBPS, 8 },
	{ IBV_RATE_30_GBPS, 12 }, { IBV_RATE_40_GBPS, 16 }, { IBV_RATE_60_GBPS, 24 }, { IBV_RATE_80_GBPS, 32 },
	{ IBV_RATE_120_GBPS, 48 },
};

int main(int argc, char **argv)
{
	conf_begin("ibv_rate_to_mult", argc, argv);
	/* DESCRIPTION: the example: IBV_RATE_5_GBPS is 2 x 2.5 Gbit/s, and 2 is IBV_RATE_5_GBPS. */
	CLAUSE("DESC-EXAMPLE", ibv_rate_to_mult(IBV_RATE_5_GBPS) == 2 && mult_to_ibv_rate(2) == IBV_RATE_5_GBPS,
	       "5 Gbps -> %d, 2 -> %d", ibv_rate_to_mult(IBV_RATE_5_GBPS), (int)mult_to_ibv_rate(2));
	/* RETURN VALUE: the multiple of the 2.5 Gbit/s base rate, for each rate that is one. */
	int bad = -1;
	for (size_t i = 0; i < sizeof rates / sizeof rates[0] && bad < 0; i++)
		if (ibv_rate_to_mult(rates[i].rate) != rates[i].mult)
			bad = (int)i;
	CLAUSE("RET-MULT", bad < 0, "rate %d -> %d, expected %d", bad < 0 ? 0 : (int)rates[bad].rate,
	       bad < 0 ? 0 : ibv_rate_to_mult(rates[bad].rate), bad < 0 ? 0 : rates[bad].mult);
	/* RETURN VALUE (mult_to_ibv_rate): the enum of each multiple: a round trip. */
	bad = -1;
	for (size_t i = 0; i < sizeof rates / sizeof rates[0] && bad < 0; i++)
		if (mult_to_ibv_rate(rates[i].mult) != rates[i].rate)
			bad = (int)i;
	CLAUSE("RET-RATE", bad < 0, "%d -> %d, expected %d", bad < 0 ? 0 : rates[bad].mult,
	       bad < 0 ? 0 : (int)mult_to_ibv_rate(rates[bad].mult), bad < 0 ? 0 : (int)rates[bad].rate);
	return conf_end();
}
