/* ibv_rate_to_mbps(3) (and mbps_to_ibv_rate): rate enum <-> Mbit/s. */
#include "ibvhelp.h"

static const struct {
	enum ibv_rate rate;
	int mbps;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 2500 },  { IBV_RATE_5_GBPS, 5000 },     { IBV_RATE_10_GBPS, 10000 },
	{ IBV_RATE_14_GBPS, 14062 },  { IBV_RATE_20_GBPS, 20000 },   { IBV_RATE_25_GBPS, 25781 },
	{ IBV_RATE_30_GBPS, 30000 },  { IBV_RATE_40_GBPS, 40000 },   { IBV_RATE_56_GBPS, 56250 },
	{ IBV_RATE_60_GBPS, 60000 },  { IBV_RATE_80_GBPS, 80000 },   { IBV_RATE_100_GBPS, 103125 },
	{ IBV_RATE_112_GBPS, 112500 }, { IBV_RATE_120_GBPS, 120000 }, { IBV_RATE_168_GBPS, 168750 },
	{ IBV_RATE_200_GBPS, 206250 }, { IBV_RATE_300_GBPS, 309375 }, { IBV_RATE_28_GBPS, 28125 },
	{ IBV_RATE_50_GBPS, 53125 },  { IBV_RATE_400_GBPS, 425000 }, { IBV_RATE_600_GBPS, 637500 },
};

int main(int argc, char **argv)
{
	conf_begin("ibv_rate_to_mbps", argc, argv);
	/* DESCRIPTION: the example: IBV_RATE_5_GBPS is 5000 Mbit/s, and 5000 is IBV_RATE_5_GBPS. */
	CLAUSE("DESC-EXAMPLE", ibv_rate_to_mbps(IBV_RATE_5_GBPS) == 5000 && mbps_to_ibv_rate(5000) == IBV_RATE_5_GBPS,
	       "5 Gbps -> %d, 5000 -> %d", ibv_rate_to_mbps(IBV_RATE_5_GBPS), (int)mbps_to_ibv_rate(5000));
	/* RETURN VALUE: the Mbit/s of every rate (its signalling rate, as rdma-core defines it). */
	int bad = -1;
	for (size_t i = 0; i < sizeof rates / sizeof rates[0] && bad < 0; i++)
		if (ibv_rate_to_mbps(rates[i].rate) != rates[i].mbps)
			bad = (int)i;
	CLAUSE("RET-MBPS", bad < 0, "rate %d -> %d Mbit/s, expected %d", bad < 0 ? 0 : (int)rates[bad].rate,
	       bad < 0 ? 0 : ibv_rate_to_mbps(rates[bad].rate), bad < 0 ? 0 : rates[bad].mbps);
	/* RETURN VALUE (mbps_to_ibv_rate): the enum of each rate's Mbit/s: a round trip. */
	bad = -1;
	for (size_t i = 0; i < sizeof rates / sizeof rates[0] && bad < 0; i++)
		if (mbps_to_ibv_rate(rates[i].mbps) != rates[i].rate)
			bad = (int)i;
	CLAUSE("RET-RATE", bad < 0, "%d Mbit/s -> %d, expected %d", bad < 0 ? 0 : rates[bad].mbps,
	       bad < 0 ? 0 : (int)mbps_to_ibv_rate(rates[bad].mbps), bad < 0 ? 0 : (int)rates[bad].rate);
	return conf_end();
}
